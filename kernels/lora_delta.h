#pragma once
// A LoRA delta computed by the kernel that consumes it (LoraSgmvConfig::gate_up_in_consumer, qkv_in_consumer): the
// shrink leaves each adapter row's xa (the chunks' partials summed, times the slot's scale, fp32,
// lora_sgmv_shrink's xa_rows) and the consumer (kernels::rope_kv_write for q|k|v,
// kernels::lora_silu_mul_xa for gate|up) adds Σ_k xa[r, m · max_rank + k] · B[slot, c, k] to the
// product's output column c before its own work, so no expand launch exists for these products.
// Reference: kernels/ref/lora_ref.h (lora_shrink_ref, then lora_expand_segments_ref for the delta).
#include <cstdint>

#include "kernels/lora.h"

namespace servelab::kernels {

struct LoraXaDelta {
  const float* xa = nullptr;          ///< [n_rows, total]: row r's scaled xa (rows with row_slot >= 0); null: none
  const int32_t* row_slot = nullptr;  ///< [n_rows]: the row's slot, < 0 for none (never read then)
  const void* b = nullptr;            ///< the pool's B [n_slots, n_out, max_rank], 16-bit
  int n_out = 0, max_rank = 0, total = 0;
  /// Segment ends (unused ones n_out): column c is in segment (c >= seg_end0) + (c >= seg_end1).
  int seg_end0 = 0, seg_end1 = 0;
};

/// The consumer's view of `pool` for the xa rows `xa` (total_rank wide) and the rows' slots.
inline LoraXaDelta lora_xa_delta(const LoraPool& pool, const float* xa, const int32_t* row_slot) {
  auto end = [&](int m) { return m + 1 < pool.n_seg ? pool.seg_end[m] : pool.n_out; };
  return LoraXaDelta{xa, row_slot, pool.b, pool.n_out, pool.max_rank, pool.total_rank(), end(0), end(1)};
}

/// The grouped shrink a product's gemv runs in its own first `blocks` blocks
/// (LoraSgmvConfig::in_product; kernels/lora_sgmv.h lora_gemv_shrink makes it): those blocks take
/// the plan's (tile, chunk) items as lora_sgmv_shrink's kernel does, finish each tile's xa rows
/// and count themselves done in *done; the product's blocks wait for that count only in their
/// epilogue, after streaming their weights. done: zero when the gemv starts (one per gemv of a
/// step, zeroed by the step's lora_plan).
struct LoraGemvShrink {
  const int32_t* n_tiles = nullptr;
  const int32_t* tiles = nullptr;
  const int32_t* perm = nullptr;
  const int32_t* perm_slot = nullptr;
  const void* a = nullptr;  ///< the pool's A [n_slots, total, n_in], 16-bit
  const float* scale = nullptr;
  float* partial = nullptr;
  int32_t* tile_done = nullptr;
  int32_t* done = nullptr;
  float* xa_rows = nullptr;  ///< [n_rows, total]: the finished rows (LoraInGemv::delta.xa)
  int n_rows = 0, n_in = 0, chunk_len = 0, n_chunks = 0, blocks = 0;
  /// Items of one row each (a count per row: tile_done holds n_rows), not of the plan's tiles.
  bool row_items = true;
};

/// A LoRA delta in a product's gemv epilogue: the shrink in the gemv's first blocks, the delta
/// from its xa rows (delta.xa) added to each output before rounding.
struct LoraInGemv {
  LoraXaDelta delta;
  LoraGemvShrink shrink;
};

}  // namespace servelab::kernels
