#pragma once
// The CPU backend's attention kernels. For a chunk of several query rows of one sequence (a
// prefill), the keys of a KV head are first gathered from their (possibly scattered) arena slots
// into a transposed [head_dim, n_ctx] buffer, so that q·Kᵀ becomes head_dim contiguous
// multiply-adds over positions, vectorized across positions, and the gather is paid once for
// all rows of the chunk. A lone query row (a decode step) reads each key straight from its slot
// instead: a gather would copy every key once to use it once.
#include <cstdint>

namespace servelab {

/// kt[i * n_ctx + p] = keys[slots[p] * head_dim + i] for p < n_ctx: [head_dim, n_ctx].
void gather_keys_transposed(const float* keys, const int64_t* slots, int n_ctx, int head_dim, float* kt);

/// One query token's attention for the query heads that share one KV head. The token sits at
/// position n_ctx - 1 and attends causally to positions [0, n_ctx).
struct AttentionGroupArgs {
  const float* q = nullptr;         ///< [group, head_dim] queries, RoPE applied
  const float* kt = nullptr;        ///< [head_dim, kt_stride] keys from gather_keys_transposed, or
                                    ///< null: read keys[slots[p]] directly
  int kt_stride = 0;                ///< positions gathered (>= n_ctx)
  const float* keys = nullptr;      ///< K plane of (layer, kv head): [n_slots, head_dim]; used when kt is null
  const float* values = nullptr;    ///< V plane of (layer, kv head): [n_slots, head_dim]
  const int64_t* slots = nullptr;   ///< [n_ctx] arena slot of each position
  int n_ctx = 0;
  int group = 1;                    ///< query heads per kv head
  int head_dim = 0;
  float scale = 1.0f;               ///< 1 / sqrt(head_dim)
  float* scores = nullptr;          ///< scratch [group, n_ctx]
  float* out = nullptr;             ///< [group, head_dim]: softmax(q·Kᵀ·scale)·V
};

/// Computes a.out. Both kernels are built for AVX-512, AVX2 and baseline x86-64, picked at load time.
void attend_group(const AttentionGroupArgs& a);

}  // namespace servelab
