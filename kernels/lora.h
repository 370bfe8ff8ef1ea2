#pragma once
// Batched LoRA for a step mixing adapters (Punica's BGMV split, as vLLM's punica kernels): each
// row carries its adapter slot (the step's lora_slot; -1 = none, padding rows included, so a
// CUDA graph of a fixed row count replays for any mix), and one linear's delta
// y += scale · (x · Aᵀ) · Bᵀ runs as
//   shrink: xa[r, :] = scale[s] · x[r, :] · A[s]ᵀ   (fp32 [n_rows, max_rank]; 0 for rows without one)
//   expand: y[r, c0 + c] += xa[r, :] · B[s][c, :]  (16-bit y, rounded once)
// One linear's adapters sit stacked in a slot pool: A [n_slots, max_rank, n_in] and
// B [n_slots, n_out, max_rank], ranks below max_rank padded with zeros (S-LoRA keeps them paged
// instead: not built). The plain C++ reference is kernels/ref/lora_ref.h.
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/attention.h"  // ScalarType

namespace servelab::kernels {

/// One linear's adapter pool on the device.
struct LoraPool {
  const void* a = nullptr;        ///< [n_slots, max_rank, n_in], bf16 or fp16
  const void* b = nullptr;        ///< [n_slots, n_out, max_rank]
  const float* scale = nullptr;   ///< [n_slots]: alpha / r (0 for an empty slot)
  int n_slots = 0;
  int n_in = 0;
  int n_out = 0;
  int max_rank = 0;               ///< <= kLoraMaxRank
};

inline constexpr int kLoraMaxRank = 128;

/// xa [n_rows, max_rank] (fp32) = scale · x [n_rows, n_in] · Aᵀ per row's slot; rows with
/// row_slot < 0 get zeros. Throws std::invalid_argument for n_in % 8 != 0 or max_rank outside
/// [1, kLoraMaxRank].
void lora_shrink(ScalarType t, const void* x, const int32_t* row_slot, int n_rows, const LoraPool& pool, float* xa,
                 cudaStream_t stream);
/// y[r, c0 + c] += Σ_k xa[r, k] · B[slot_r, c, k] for c < pool.n_out, rows with row_slot >= 0
/// (others untouched); y 16-bit with row stride ld_y.
void lora_expand(ScalarType t, const float* xa, const int32_t* row_slot, int n_rows, const LoraPool& pool, void* y,
                 int ld_y, int c0, cudaStream_t stream);

}  // namespace servelab::kernels
