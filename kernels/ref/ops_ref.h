#pragma once
// Plain C++ references for the element-wise and copy kernels: RoPE, KV write, RMSNorm (plain and
// fused with the residual add), SiLU-and-multiply, embedding gather, block copies, and a GEMM.
// Inputs are float (tests round them through bf16 first); arithmetic is float/double loops.
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/step_input.h"

namespace servelab::kernels {

/// Llama 3 `rope_scaling` (rope_type "llama3"): long wavelengths divided by factor, short ones
/// kept, a smooth blend between low_freq_factor and high_freq_factor.
struct Llama3RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

/// Inverse frequencies [head_dim / 2]: theta^(-2i / head_dim), rescaled by `scaling` when given.
/// The kernels take this array, so any scaling scheme reduces to precomputing it.
std::vector<float> rope_inv_freq(float theta, int head_dim, const Llama3RopeScaling* scaling = nullptr);

/// Rotates each head of x [n_tokens, n_heads, head_dim] in place at positions[t] (rotate-half,
/// Hugging Face Llama convention: pairs (i, i + head_dim/2)). Angles in double.
void rope_ref(float* x, int n_tokens, int n_heads, int head_dim, const int32_t* positions,
              const float* inv_freq);

/// cache[slot_mapping[t], h, :] = rows[t, h, :] for K and V ([n_tokens, n_kv_heads, head_dim]).
/// A negative slot skips the row (padding).
void kv_write_ref(const float* k, const float* v, int n_tokens, const int64_t* slot_mapping, KvShape shape,
                  float* k_cache, float* v_cache);

/// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, rows of width d.
void rms_norm_ref(const float* x, const float* weight, int n_rows, int d, float eps, float* y);

/// residual[r] += x[r] (then rounded by `round` if given, as bf16 storage does), y = rms_norm(residual).
void add_rms_norm_ref(const float* x, float* residual, const float* weight, int n_rows, int d, float eps,
                      float* y, float (*round)(float) = nullptr);

/// out[r, i] = silu(gate_up[r, i]) * gate_up[r, ffn + i]: gate and up halves of one merged row.
void silu_mul_ref(const float* gate_up, int n_rows, int ffn, float* out);

/// out[t, :] = table[ids[t], :], rows of width d.
void embedding_ref(const float* table, const int32_t* ids, int n_tokens, int d, float* out);

/// Copies whole blocks (block_size slots each) inside one arena: dst block <- src block.
void block_copy_ref(float* cache, KvShape shape, int block_size, const std::vector<std::pair<int32_t, int32_t>>& src_dst);

/// Reference of apply_block_table_updates: table[index] = block for each (index, block) pair, in order.
void block_table_update_ref(int32_t* table, const int32_t* index_block_pairs, int n_updates);

/// y[M, N] = x[M, K] · w[N, K]ᵀ (weights stored [out, in] as Hugging Face does), double sums.
void gemm_ref(const float* x, const float* w, int m, int n, int k, float* y);

/// out[r, i] = x[r, perm[i]] ([rows, cols] each): act-order INT4's activations in the codes' order.
void gather_columns_ref(const float* x, const int32_t* perm, int rows, int cols, float* out);

/// The contract of Gemm::run and run_gemv: y = x · wᵀ, plus y's previous value when accumulate
/// (added in double), each result rounded by `round` when given (bf16 storage). Double sums.
void gemm_ref(const float* x, const float* w, int m, int n, int k, float* y, bool accumulate,
              float (*round)(float) = nullptr);

/// Reference of the fused gate|up product and SiLU·mul (run_gemv_silu_mul): w [2 * ffn, k] is the
/// merged [gate; up] projection; gate and up are x · wᵀ (double sums) rounded by `round` when given
/// (as stored in bf16), then act[r, i] = silu(gate) * up (float arithmetic as silu_mul's kernel),
/// rounded by `round`.
void gate_up_silu_ref(const float* x, const float* w, int m, int ffn, int k, float* act,
                      float (*round)(float) = nullptr);

}  // namespace servelab::kernels
