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

}  // namespace servelab::kernels
