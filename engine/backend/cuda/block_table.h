#pragma once
// Persistent device block tables updated by what changed (issue 7, item 3). Plain C++ (tested on
// the CPU): the host mirror of the table the CUDA backend keeps on the device, and the diff that
// turns a step's full block tables into (row per sequence, changed entries).
//
// The device table is [n_rows, stride] int32, one row per sequence the backend has seen, keyed by
// sequence id. Row 0 is reserved and stays all zeros (padding sequences of a CUDA graph bucket read
// it: block 0, as the full-table path pads). A sequence keeps its row while it is in the steps;
// when it leaves the batch its row becomes recyclable and is handed to a new sequence when no never
// used row is left (least recently used first), so a sequence that pauses for a step keeps its
// row, and only the entries that differ from the mirror travel. The diff always compares the
// desired entries with the mirror (what the device holds), so any change is caught whatever caused
// it: a block appended, a new sequence (or a recycled row), copy-on-write, swap-in to other blocks,
// recompute after preemption, a new KV manager reusing sequence ids.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/step_input.h"

namespace servelab::cuda {

/// What the device must do before a step reads the table: if `resized`, allocate the new
/// [n_rows, stride] table, zero it and copy the old [old_rows, old_stride] into its top-left
/// corner; then apply `updates`. `rows[s]` is the table row of the step's sequence s.
struct BlockTableStep {
  std::vector<int32_t> rows;                        ///< [n_seqs]
  std::vector<kernels::BlockTableUpdate> updates;   ///< distinct indices, row * stride + col
  bool resized = false;
  int old_rows = 0, old_stride = 0;                 ///< the table before the resize (0: none)
  int n_rows = 0, stride = 0;                       ///< the table after this step's resize
};

/// Host mirror of the persistent block table and the per-step diff against it.
class BlockTableDiff {
 public:
  /// Fills `out` for a paged step: sequence s has id seq_ids[s] and its first
  /// ceil(in.context_lens[s] / in.block_size) entries of row s of in.block_tables are its blocks.
  /// Updates the mirror as if the device applied `out`. Throws std::invalid_argument when an id
  /// appears twice or the input is not paged / not consistent (seq_ids.size() != n_seqs).
  void plan(std::span<const uint64_t> seq_ids, const kernels::StepInput& in, BlockTableStep& out);
  /// Forgets every row (the device table is dropped too): the next plan() allocates afresh.
  /// A reservation stays.
  void reset();
  /// Every table plan() allocates from now on has at least `rows` rows (row 0 included) and
  /// `stride` entries per row (each rounded up to a power of two), so steps within them never
  /// resize the table.
  void reserve(int rows, int stride);

  int n_rows() const { return n_rows_; }
  int stride() const { return stride_; }
  /// The mirror, [n_rows, stride]: what the device table holds after the last plan().
  const std::vector<int32_t>& mirror() const { return mirror_; }
  /// Row of a sequence id, or -1.
  int row_of(uint64_t seq_id) const;

  static constexpr int kMinRows = 64;     ///< first allocation (row 0 reserved)
  static constexpr int kMinStride = 16;   ///< entries per row at least; a power of two

 private:
  void resize(int rows, int stride, BlockTableStep& out);

  int n_rows_ = 0, stride_ = 0;
  int min_rows_ = 0, min_stride_ = 0;  ///< reserve()
  std::vector<int32_t> mirror_;
  std::vector<uint64_t> owner_;     ///< [n_rows] sequence id of each row
  std::vector<char> owned_;         ///< [n_rows] 1 when owner_ is valid
  std::vector<uint64_t> last_use_;  ///< [n_rows] step that last used the row
  int next_fresh_ = 1;              ///< rows [next_fresh_, n_rows_) were never handed out (0: reserved)
  std::unordered_map<uint64_t, int> row_of_;
  uint64_t step_ = 0;
};

}  // namespace servelab::cuda
