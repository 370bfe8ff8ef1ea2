#pragma once
// Builds the flat per-step input (kernels::StepInput) from the engine's Batch and KvManager: what
// every backend reads a step from (the CPU backend directly, the CUDA backend packed and uploaded
// in one copy). The KV layout is read with O(blocks) kv.slot() calls per sequence (paged: one per
// block; naive: one per sequence), not one per position; backends address K/V through the
// StepInput's slot mapping, block tables or base slots afterwards.
#include <cstdint>

#include "engine/backend/backend.h"
#include "engine/kv/kv_manager.h"
#include "kernels/step_input.h"

namespace servelab {

/// One step's rows: the StepInput plus the padding rows static batching computes and discards.
struct StepPlan {
  kernels::StepInput in;
  /// Rows after the real ones that run through the dense layers only (token 0, never written
  /// to the cache, never attended to, never sampled): batch.n_padding_tokens.
  int n_padding = 0;
  int n_rows() const { return in.n_tokens() + n_padding; }
};

/// Fills `plan` (reusing its vectors) for `batch` over `kv`:
/// - rows in entry order, positions [seq->n_computed, + n_new), token ids from seq->tokens;
/// - paged (kv.kind() == paged): block b of a sequence is kv.slot(seq, b * block_size) /
///   block_size with block_size = kv.unit_slots(); block_table_stride = the most blocks any
///   sequence of the step holds; naive: base_slots[s] = kv.slot(seq, 0);
/// - slot_mapping from those, as kernels::KvAddressing::slot computes it;
/// - per entry with sample set, max(1, n_samples) draws of its last row: temperature (0 for greedy or
///   top_k == 1), top_k, top_p and seed from seq->sampling, seq_key = seq->sample_index + k,
///   sample_position = n_computed + n_new (the index the new token takes), as CpuBackend does;
/// - decode_only when every entry has n_new == 1.
/// Throws std::invalid_argument naming the entry and field for a malformed batch (null seq,
/// n_new < 1, positions outside the tokens, a token outside [0, vocab), bad sampling values).
void build_step_input(const Batch& batch, const KvManager& kv, int vocab, StepPlan& plan);

}  // namespace servelab
