#pragma once
// The gate|up LoRA delta added inside SiLU·mul (LoraSgmvConfig::gate_up_beside): the adapters'
// delta of the gate|up product is computed beside the product, on the LoRA side stream, into a
// scratch of its own (lora_sgmv_expand with accumulate = false), and this kernel, in place of
// kernels::silu_mul, adds it for the rows that have an adapter, so no LoRA launch follows the
// product on the step's critical path. Reference: kernels/ref/lora_ref.h lora_silu_mul_ref.
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/lora_delta.h"
#include "kernels/ops.h"

namespace servelab::kernels {

/// act[r, j] = silu(g + dg) · (u + du), g = gate_up[r, j], u = gate_up[r, ffn + j], and dg, du
/// delta's values at the same places for rows with row_slot[r] >= 0 (0 for the others, whose
/// delta rows are never read); the sums in fp32, act rounded once. gate_up, delta [n_rows, 2 · ffn],
/// act [n_rows, ffn], 16-bit. Throws std::invalid_argument unless ffn is a multiple of 8.
void lora_silu_mul(ScalarType t, const void* gate_up, const void* delta, const int32_t* row_slot, void* act,
                   int n_rows, int ffn, cudaStream_t stream);
/// The same with the delta computed here (LoraSgmvConfig::*_in_consumer): dg, du =
/// Σ_k xa[r, m · max_rank + k] · B[slot, c, k] for the columns j and ffn + j (kernels/lora_delta.h;
/// delta.n_out = 2 · ffn), in fp32, for rows with delta.row_slot[r] >= 0. Throws
/// std::invalid_argument unless ffn is a multiple of 8 and the delta fits (lora_xa_delta_check).
void lora_silu_mul_xa(ScalarType t, const void* gate_up, const LoraXaDelta& delta, void* act, int n_rows, int ffn,
                      cudaStream_t stream);

/// A step's runs of rows of one adapter (kernels/lora_runs.h, the tensor-core path of eager
/// steps) whose gate|up delta the SiLU·mul computes itself from their xa (LoraGemm::shrink's
/// output, scale included), so no expand launch follows the gate|up product for them.
inline constexpr int kLoraConsumerRuns = 8;
struct LoraRunsDelta {
  const void* xa = nullptr;  ///< 16-bit [n_rows, 2 · max_rank]: gate's ranks then up's, for the runs' rows
  const void* b = nullptr;   ///< the pool's B [n_slots, 2 · ffn, max_rank], 16-bit
  int max_rank = 0;          ///< 8, 16, 24 or 32 (lora_silu_mul_runs_fits)
  int n_runs = 0;            ///< <= kLoraConsumerRuns
  int first[kLoraConsumerRuns] = {}, count[kLoraConsumerRuns] = {}, slot[kLoraConsumerRuns] = {};
};
/// Whether lora_silu_mul_runs takes these runs: at most kLoraConsumerRuns of them, a rank it is
/// compiled for (B's columns held in registers across a tile of rows).
inline bool lora_silu_mul_runs_fits(int n_runs, int max_rank) {
  return n_runs >= 1 && n_runs <= kLoraConsumerRuns && max_rank % 8 == 0 && max_rank >= 8 && max_rank <= 32;
}
/// act[r, j] = silu(g + dg) · (u + du) for the runs' rows, dg = Σ_k xa[r, k] · B[s, j, k] and
/// du = Σ_k xa[r, R + k] · B[s, ffn + j, k] (R = max_rank, s the run's slot), fp32 accumulation,
/// act rounded once; other rows silu_mul's bits (their deltas, if any, already in gate_up). A
/// block takes 16 rows by 128 columns and multiplies the tile's xa by its columns' B on the tensor
/// cores (mma m16n8k16, a pass per slot among the tile's rows), so B is read once a tile and the
/// delta costs a few instructions an output; each lane loads its outputs' gate and up pairs before
/// the products, so a warp waits for memory once. Throws
/// std::invalid_argument unless ffn is a multiple of 8 and lora_silu_mul_runs_fits. Reference:
/// lora_expand_segments_ref, then lora_silu_mul_ref (kernels/ref/lora_ref.h).
void lora_silu_mul_runs(ScalarType t, const void* gate_up, const LoraRunsDelta& d, void* act, int n_rows, int ffn,
                        cudaStream_t stream);

}  // namespace servelab::kernels
