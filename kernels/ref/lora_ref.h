#pragma once
// Plain C++ reference of the batched LoRA shrink/expand (kernels/lora.h): float in and out,
// double accumulation, the same stacked slot pool layout.
#include <cstdint>
#include <vector>

namespace servelab::kernels {

/// xa[r, k] = scale[s] · Σ_i x[r, i] · a[s, k, i] with s = row_slot[r] (0 when s < 0).
/// a: [n_slots, max_rank, n_in]; xa: [n_rows, max_rank].
void lora_shrink_ref(const float* x, const int32_t* row_slot, int n_rows, const float* a, const float* scale,
                     int n_in, int max_rank, float* xa);
/// y[r, c0 + c] += Σ_k xa[r, k] · b[s, c, k] for c < n_out, rows with s = row_slot[r] >= 0.
/// b: [n_slots, n_out, max_rank]; y row stride ld_y.
void lora_expand_ref(const float* xa, const int32_t* row_slot, int n_rows, const float* b, int n_out, int max_rank,
                     float* y, int ld_y, int c0);
/// The fused form (kernels/lora.h's segments): y[r, c0 + c] += Σ_k xa[r, m · max_rank + k] ·
/// b[s, c, k], m the segment of column c (the first with c < seg_end[m]; seg_end[n_seg - 1] =
/// n_out); xa [n_rows, n_seg · max_rank] as lora_shrink_ref gives it for A
/// [n_slots, n_seg · max_rank, n_in].
void lora_expand_segments_ref(const float* xa, const int32_t* row_slot, int n_rows, const float* b, int n_out,
                              int max_rank, int n_seg, const int* seg_end, float* y, int ld_y, int c0);

/// kernels/lora_fused_gemm.h: y[r, c] = Σ_i x[r, i] · w[c, i], plus for rows with row_slot[r] >= 0
/// Σ_k round16(xa[r, m · max_rank + k]) · b[s, c, k], xa as lora_shrink_ref gives it (scale
/// included, A [n_slots, n_seg · max_rank, n_in]), m the segment of column c; round16 the kernel's
/// 16-bit rounding of xa (null: none). w [n_out, n_in], y [n_rows, n_out].
void lora_fused_gemm_ref(const float* x, const float* w, int n_rows, int n_out, int n_in, const int32_t* row_slot,
                         const float* a, const float* b, const float* scale, int max_rank, int n_seg, const int* seg_end,
                         float (*round16)(float), float* y);

/// kernels/lora_act.h: act[r, j] = silu(g + dg) · (u + du) with g = gate_up[r, j], u =
/// gate_up[r, ffn + j] and the delta's values at the same places for rows with row_slot[r] >= 0
/// (none for the others). gate_up, delta [n_rows, 2 · ffn]; act [n_rows, ffn].
void lora_silu_mul_ref(const float* gate_up, const float* delta, const int32_t* row_slot, int n_rows, int ffn,
                       float* act);

/// kernels/lora_sgmv.h's plan: the rows with row_slot[r] in [0, n_slots), by slot ascending and
/// row ascending within a slot (perm), cut into tiles of at most tile_rows rows of one slot
/// (tiles: slot, first index into perm, count), slot by slot.
struct LoraPlanRef {
  std::vector<int32_t> tiles;  ///< 3 per tile
  std::vector<int32_t> perm;
  int n_tiles() const { return int(tiles.size() / 3); }
};
LoraPlanRef lora_plan_ref(const int32_t* row_slot, int n_rows, int n_slots, int tile_rows);

}  // namespace servelab::kernels
