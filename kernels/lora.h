#pragma once
// Batched LoRA for a step mixing adapters (Punica's BGMV split, as vLLM's punica kernels): each
// row carries its adapter slot (the step's lora_slot; -1 = none, padding rows included, so a
// CUDA graph of a fixed row count replays for any mix), and one linear's delta
// y += scale · (x · Aᵀ) · Bᵀ runs as
//   shrink: xa[r, :] = scale[s] · x[r, :] · A[s]ᵀ   (fp32 [n_rows, max_rank]; 0 for rows without one)
//   expand: y[r, c0 + c] += xa[r, :] · B[s][c, :]  (16-bit y, rounded once)
// One linear's adapters sit stacked in a slot pool: A [n_slots, max_rank, n_in] and
// B [n_slots, n_out, max_rank], ranks below max_rank padded with zeros (S-LoRA keeps them paged
// instead: not built). A fused product (q|k|v, gate|up) runs its linears' adapters as segments of
// one pair of launches: A stacks each segment's ranks ([n_slots, n_seg · max_rank, n_in]), B stacks
// their output columns in the fused weight's order, and the expand picks each column's segment.
// The plain C++ reference is kernels/ref/lora_ref.h.
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/attention.h"  // ScalarType

namespace servelab::kernels {

inline constexpr int kLoraMaxRank = 128;
/// Linears one pool fuses at most (q, k and v).
inline constexpr int kLoraMaxSegments = 3;

/// One linear's (or one fused product's) adapter pool on the device.
struct LoraPool {
  const void* a = nullptr;        ///< [n_slots, max_rank, n_in], bf16 or fp16
  const void* b = nullptr;        ///< [n_slots, n_out, max_rank]
  const float* scale = nullptr;   ///< [n_slots]: alpha / r (0 for an empty slot)
  int n_slots = 0;
  int n_in = 0;
  int n_out = 0;
  int max_rank = 0;               ///< <= kLoraMaxRank, per segment
  /// Segments (fused linears), 1..kLoraMaxSegments: A is [n_slots, n_seg · max_rank, n_in] (segment
  /// m's ranks at m · max_rank), xa [n_rows, n_seg · max_rank]; output column c belongs to the first
  /// segment m with c < seg_end[m] (seg_end[n_seg - 1] is n_out, set or not).
  int n_seg = 1;
  int seg_end[kLoraMaxSegments] = {};
  /// Ranks of all segments: xa's row width.
  int total_rank() const { return n_seg * max_rank; }
};

/// Throws std::invalid_argument naming `who` and the field when `pool`'s ranks, widths or
/// segments are outside what the kernels take.
void check_lora_pool(const LoraPool& pool, const char* who);

/// xa [n_rows, total_rank] (fp32) = scale · x [n_rows, n_in] · Aᵀ per row's slot; rows with
/// row_slot < 0 get zeros. Throws std::invalid_argument for n_in % 8 != 0, max_rank outside
/// [1, kLoraMaxRank], n_seg outside [1, kLoraMaxSegments] or seg_end not ascending within n_out.
void lora_shrink(ScalarType t, const void* x, const int32_t* row_slot, int n_rows, const LoraPool& pool, float* xa,
                 cudaStream_t stream);
/// y[r, c0 + c] += Σ_k xa[r, m · max_rank + k] · B[slot_r, c, k] for c < pool.n_out (m: c's
/// segment, 0 without segments), rows with row_slot >= 0 (others untouched); y 16-bit with row
/// stride ld_y. B rows load 16 bytes at a time when max_rank % 8 == 0.
void lora_expand(ScalarType t, const float* xa, const int32_t* row_slot, int n_rows, const LoraPool& pool, void* y,
                 int ld_y, int c0, cudaStream_t stream);

}  // namespace servelab::kernels
