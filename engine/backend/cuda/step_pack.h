#pragma once
// Packs a Step into the one host buffer the CUDA backend uploads per step. Plain C++ (tested
// on the CPU). Two shapes:
// - compact: exactly the plan's rows, sequences and samples (eager steps);
// - padded to a bucket of B sequences with a fixed block-table stride (decode steps replayed from
//   a CUDA graph): the graph's kernels read B rows, so sequences s >= n_seqs are padding rows
//   (token 0 at position 0, slot -1 = not written, context 1 at block 0 / base slot 0, greedy
//   sample of their own row), whose results are never copied back.
// Paged block tables travel either whole ([n_seqs, stride] every step), or, with persistent
// device tables (block_table.h), as a row per sequence into the device table plus the entries
// that changed since the last step: `tables` given to the layout and pack functions. The list of
// changes goes last, so a bucket's offsets do not depend on its length (a CUDA graph reads the
// count from the buffer).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/backend/cuda/block_table.h"
#include "engine/backend/backend.h"

namespace servelab::cuda {

/// Byte offsets of each packed array in the buffer (16-byte aligned; one per row of
/// SERVELAB_STEP_FIELDS, 0 for the arrays that do not travel packed), and the sizes packed.
struct PackedLayout {
#define SERVELAB_PACKED_OFFSET(name, type, extent, travel, pad, pad_value) size_t name = 0;
  SERVELAB_STEP_FIELDS(SERVELAB_PACKED_OFFSET)
#undef SERVELAB_PACKED_OFFSET
  size_t table_rows = 0, update_count = 0, updates = 0, total = 0;
  /// A verification step in its one-row form (verify_rows.h) run by decode_attention_rows: one
  /// int32 per sequence, how its rows group (padding sequences 1); 0 = not packed.
  size_t row_spans = 0;
  bool has_row_spans = false;
  int n_rows = 0;        ///< token_ids entries (real rows + padding rows)
  int n_tokens = 0;      ///< rows with a position and a slot (attention rows)
  int n_seqs = 0;
  int table_stride = 0;  ///< block-table entries per sequence (paged)
  int n_samples = 0;
  bool paged = false;
  bool persistent_tables = false;  ///< paged: table_rows + update_count + updates, no block_tables
  int n_updates = 0;               ///< entries at `updates` (kernels::BlockTableUpdate)
  /// Entries a packed array of `extent` holds in this layout.
  size_t count(kernels::StepExtent extent) const;
};

/// Compact layout of `plan` (n_rows = plan.n_rows(), stride = plan's own; with `tables`, a paged
/// plan carries tables->rows and tables->updates instead of its block tables).
/// `spans` (verify_rows.h; one per sequence) adds the row spans array.
PackedLayout compact_layout(const Step& plan, const BlockTableStep* tables = nullptr,
                            const std::vector<int32_t>* spans = nullptr);
/// A decode-only plan padded to `bucket` sequences (>= plan.in.n_seqs()) with `table_stride`
/// block-table entries per sequence (>= plan's stride; paged only, ignored with `tables`: padding
/// sequences then read row 0 of the device table). Every sequence samples once.
PackedLayout bucket_layout(const Step& plan, int bucket, int table_stride, const BlockTableStep* tables = nullptr,
                           const std::vector<int32_t>* spans = nullptr);
/// True when `plan` can be padded to a bucket: decode only, no padding rows, sample k is row k,
/// no token masks in mask_words (such a step runs eagerly: its masks upload on their own). Late
/// masks (in.late_masks) are fine: the graph then runs the forward only and the draws follow it.
bool bucketable(const Step& plan);

/// Writes the plan's arrays at `layout`'s offsets into out[0, layout.total), padding as the layout
/// says (padding rows of a compact layout read token 0). `tables`: the same as given to the layout.
/// `spans`: the same as given to the layout (padding sequences get 1).
void pack_step(const Step& plan, const PackedLayout& layout, uint8_t* out, const BlockTableStep* tables = nullptr,
               const std::vector<int32_t>* spans = nullptr);

}  // namespace servelab::cuda
