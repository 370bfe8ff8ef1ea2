#pragma once
// Element-wise, normalization, embedding and KV copy kernels (host launchers, device pointers).
// Row widths must be multiples of 8 (16-byte vectors). Fused variants and the unfused sequence
// they replace are both here so `fusion: off` can be measured.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/lora_delta.h"

namespace servelab::kernels {

/// The merged QKV projection output: per token [n_heads + 2 * n_kv_heads, head_dim] (Q heads,
/// then K heads, then V heads), row stride qkv_row_stride elements.
struct QkvArgs {
  ScalarType dtype = ScalarType::bf16;
  void* qkv = nullptr;
  int64_t qkv_row_stride = 0;
  int n_tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  const void* bias = nullptr;        ///< [(n_heads + 2 n_kv_heads) * head_dim] or null (Qwen2 has one)
  const int32_t* positions = nullptr;  ///< [n_tokens]
  const float* inv_freq = nullptr;   ///< [head_dim / 2] (rope_inv_freq, Llama 3 scaling included)
  const int64_t* slot_mapping = nullptr;  ///< [n_tokens]; negative = padding row, not written
  void* k_cache = nullptr;           ///< [n_slots, n_kv_heads, head_dim]
  void* v_cache = nullptr;
  /// rope_kv_write only (the others refuse it): a per-row addend of the q|k|v values, added with
  /// the bias before RoPE and the K/V write, for the rows whose delta_rows[t] >= 0 (the LoRA
  /// delta of q|k|v computed beside the product, LoraSgmvConfig::qkv_beside). [n_tokens,
  /// qkv_row_stride] in the dtype; null: none.
  const void* delta = nullptr;
  const int32_t* delta_rows = nullptr;
  /// rope_kv_write only: the q|k|v LoRA delta computed here from the rows' xa and B
  /// (kernels/lora_delta.h, LoraSgmvConfig::*_in_consumer), added before the bias for rows
  /// with lora.row_slot[t] >= 0; lora.xa null: none. lora.n_out: the q|k|v width.
  LoraXaDelta lora;
};

/// Whether the kernels that support programmatic dependent launch (gemv, norms, silu_mul, RoPE/KV
/// write, embedding; see launch_pdl in common.cuh) are launched with it, so that each may start
/// (and stream its weights) while its predecessor drains. Per host thread; read at launch (a CUDA
/// graph keeps what was set when it was captured). Default on; the cuda backend sets it per step
/// from CudaBackendOptions::decode.
bool pdl_enabled();
void set_pdl_enabled(bool on);

/// Fused: bias, RoPE on Q (in place) and K, K and V written to the cache at slot_mapping.
void rope_kv_write(const QkvArgs& a, cudaStream_t stream);
/// Unfused step 1: bias and RoPE on Q and K in place.
void rope_inplace(const QkvArgs& a, cudaStream_t stream);
/// Unfused step 2: copy (already rotated) K and V of qkv into the cache.
void kv_write(const QkvArgs& a, cudaStream_t stream);

/// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * weight; rows of width d.
void rms_norm(ScalarType t, const void* x, const void* weight, void* out, int n_rows, int d, float eps,
              cudaStream_t stream);
/// residual += x (stored rounded), out = rms_norm(residual) * weight: one pass instead of two.
void add_rms_norm(ScalarType t, const void* x, void* residual, const void* weight, void* out, int n_rows, int d,
                  float eps, cudaStream_t stream);
/// rms_norm and add_rms_norm writing their output in another column order: out[r, i] = the norm's
/// out[r, perm[i]] (the same bits), perm a permutation of 0..d-1 on the device. Act-order INT4
/// (GPTQ's g_idx): the product after the norm takes x in its codes' order without a gather.
void rms_norm_permuted(ScalarType t, const void* x, const void* weight, void* out, const int32_t* perm, int n_rows,
                       int d, float eps, cudaStream_t stream);
void add_rms_norm_permuted(ScalarType t, const void* x, void* residual, const void* weight, void* out,
                           const int32_t* perm, int n_rows, int d, float eps, cudaStream_t stream);
/// residual += x (the unfused add).
void residual_add(ScalarType t, const void* x, void* residual, int64_t n, cudaStream_t stream);
/// out[r, i] = silu(gate_up[r, i]) * gate_up[r, ffn + i].
void silu_mul(ScalarType t, const void* gate_up, void* out, int n_rows, int ffn, cudaStream_t stream);
/// Unfused: out = silu(gate) (stored), then out *= up: two passes, for `fusion: off`.
void silu_then_mul(ScalarType t, const void* gate_up, void* out, int n_rows, int ffn, cudaStream_t stream);
/// out[t] = table[ids[t]], rows of width d.
void embedding(ScalarType t, const void* table, const int32_t* ids, void* out, int n_tokens, int d,
               cudaStream_t stream);

/// Copy-on-write: for each pair, block dst <- block src in every arena of `arenas` (all layers'
/// K and V). arenas: device array of n_arenas device pointers; block_bytes multiple of 16.
void copy_blocks(void* const* arenas, int n_arenas, const int32_t* src_dst, int n_pairs, int64_t block_bytes,
                 cudaStream_t stream);
/// Swap out: packs blocks[i] of every arena into dst[(i * n_arenas + a) * block_bytes]. dst may be
/// device memory or mapped pinned host memory (cudaHostAllocMapped), so one launch does the swap.
void gather_blocks(void* const* arenas, int n_arenas, const int32_t* blocks, int n_blocks, int64_t block_bytes,
                   void* dst, cudaStream_t stream);
/// Swap in: the inverse of gather_blocks.
void scatter_blocks(void* const* arenas, int n_arenas, const int32_t* blocks, int n_blocks, int64_t block_bytes,
                    const void* src, cudaStream_t stream);

/// Applies a step's block-table changes to the persistent device table before attention reads it:
/// table[updates[i].index] = updates[i].block for i < *count. The count is read on the device,
/// so a CUDA graph captured once replays with each step's list; the grid is sized for
/// `grid_updates` entries and strides over any more. Indices must be distinct (BlockTableDiff
/// emits at most one per entry). Launches nothing when grid_updates <= 0.
void apply_block_table_updates(int32_t* table, const BlockTableUpdate* updates, const int32_t* count,
                               int grid_updates, cudaStream_t stream);

}  // namespace servelab::kernels
