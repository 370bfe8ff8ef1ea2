// RoPE fused with the KV-cache write through the per-step slot mapping, plus the two unfused
// kernels it replaces (rope in place, then KV write) for `fusion: off`.
// Grid (tokens, chunks): a token's work items (vector pairs to rotate, vectors to copy) are dealt
// over `chunks` blocks (several when there are few tokens, so a decode step's one token is not
// one block's serial loop); each block builds the token's cos/sin table (head_dim / 2 angles) is built once in shared
// memory and shared by all its heads; every head is moved as 16-byte vectors, the rotate-half
// partner vectors (i, i + head_dim / 2) held by one thread. Launched with programmatic dependent
// launch (launch_pdl, common.cuh): a block waits for the QKV product at the top.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/lora_delta.cuh"
#include "kernels/ops.h"
#include "kernels/rope_pair.cuh"

namespace servelab::kernels {
namespace {

constexpr int kThreads = 128;
enum Mode { kFused = 0, kRopeOnly = 1, kWriteOnly = 2 };

template <typename T>
__device__ __forceinline__ void add_bias(float (&f)[8], const T* bias, int off) {
  if (bias == nullptr) return;
  float b[8];
  unpack8<T>(*reinterpret_cast<const Vec8*>(bias + off), b);
#pragma unroll
  for (int j = 0; j < 8; ++j) f[j] += b[j];
}

template <typename T, int kMode>
__global__ void __launch_bounds__(kThreads) rope_kv_kernel(const QkvArgs a) {
  extern __shared__ __align__(16) float trig[];  // [half] cos, then [half] sin; then the LoRA deltas
  pdl_wait();
  pdl_launch_dependents();
  const int t = blockIdx.x, hd = a.head_dim, half = hd / 2, hv = half / 8, dv = hd / 8;
  T* row = static_cast<T*>(a.qkv) + t * a.qkv_row_stride;
  const T* bias = static_cast<const T*>(a.bias);
  const int64_t slot = a.slot_mapping ? a.slot_mapping[t] : -1;
  // The row's LoRA delta (rope_kv_write only), added like the bias: null for rows without one.
  const T* delta =
      a.delta && a.delta_rows[t] >= 0 ? static_cast<const T*>(a.delta) + t * a.qkv_row_stride : nullptr;
  // Or the delta computed here from the row's xa (rope_kv_write only): the row's slot, -1 for none.
  const int lora_slot = kMode == kFused && a.lora.xa ? a.lora.row_slot[t] : -1;
  const int64_t kv_row = int64_t(a.n_kv_heads) * hd;
  if (kMode == kWriteOnly) {
    if (slot < 0) return;
    for (int w = blockIdx.y * kThreads + threadIdx.x; w < 2 * a.n_kv_heads * dv; w += kThreads * gridDim.y) {
      const bool is_v = w >= a.n_kv_heads * dv;
      const int e = (is_v ? w - a.n_kv_heads * dv : w) * 8;  // element within the K (or V) part
      const Vec8 v = *reinterpret_cast<const Vec8*>(row + (a.n_heads + (is_v ? a.n_kv_heads : 0)) * hd + e);
      *reinterpret_cast<Vec8*>(static_cast<T*>(is_v ? a.v_cache : a.k_cache) + slot * kv_row + e) = v;
    }
    return;
  }
  const float pos = static_cast<float>(a.positions[t]);
  const int first = blockIdx.y * kThreads + threadIdx.x, stride = kThreads * gridDim.y;
  for (int i = threadIdx.x; i < half; i += kThreads) {
    float s, c;
    sincosf(pos * a.inv_freq[i], &s, &c);  // fp32 angle, as transformers computes it
    trig[i] = c;
    trig[half + i] = s;
  }
  __syncthreads();
  const int n_rot = (a.n_heads + a.n_kv_heads) * hv, n_items = n_rot + a.n_kv_heads * dv;
  // The row's LoRA deltas, staged per pass of the block's kThreads items (lora_delta.cuh): item i's
  // lo (or V) columns at [16 i, 16 i + 8), its hi columns at [16 i + 8, 16 i + 16).
  // V items have no hi columns (-1: not staged).
  float* lora_d = trig + hd;
  // The loop runs over the block's passes (uniform over the block: the staging's barriers).
  for (int w = first; w - int(threadIdx.x) < n_items; w += stride) {
    if (lora_slot >= 0) {
      const int base = w - int(threadIdx.x);
      auto column = [&](int q) {
        const int item = base + q / 16, part = (q / 8) % 2, j = q % 8;
        if (item < n_rot) return (item / hv) * hd + (item % hv) * 8 + part * half + j;
        return part ? -1 : (a.n_heads + a.n_kv_heads) * hd + (item - n_rot) * 8 + j;
      };
      __syncthreads();  // the previous pass has read its deltas
      lora_xa_stage<T>(a.lora, t, lora_slot, 16 * min(kThreads, n_items - base), column, lora_d);
    }
    if (w >= n_items) continue;
    const float* my_d = lora_d + 16 * threadIdx.x;
    if (w < n_rot) {  // a Q or K head: rotate the pair of vectors (i, i + half)
      const int head = w / hv, c = (w % hv) * 8, lo = head * hd + c, hi = lo + half;
      float x[8], y[8];
      unpack8<T>(*reinterpret_cast<const Vec8*>(row + lo), x);
      unpack8<T>(*reinterpret_cast<const Vec8*>(row + hi), y);
      add_bias(x, delta, lo);
      add_bias(y, delta, hi);
      if (lora_slot >= 0)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          x[j] += my_d[j];
          y[j] += my_d[8 + j];
        }
      add_bias(x, bias, lo);
      add_bias(y, bias, hi);
      float rx[8], ry[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        rope_rotate(x[j], y[j], trig[c + j], trig[half + c + j], rx[j], ry[j]);
      }
      if (kMode == kFused && head >= a.n_heads) {
        if (slot < 0) continue;
        T* dst = static_cast<T*>(a.k_cache) + slot * kv_row + (head - a.n_heads) * hd + c;
        *reinterpret_cast<Vec8*>(dst) = pack8<T>(rx);
        *reinterpret_cast<Vec8*>(dst + half) = pack8<T>(ry);
      } else {
        *reinterpret_cast<Vec8*>(row + lo) = pack8<T>(rx);
        *reinterpret_cast<Vec8*>(row + hi) = pack8<T>(ry);
      }
    } else {  // a V vector: bias, then to the cache (fused) or back in place (unfused, bias only)
      const int e = (w - n_rot) * 8, off = (a.n_heads + a.n_kv_heads) * hd + e;
      if (kMode == kRopeOnly && bias == nullptr) continue;
      if (kMode == kFused && slot < 0) continue;
      float v[8];
      unpack8<T>(*reinterpret_cast<const Vec8*>(row + off), v);
      add_bias(v, delta, off);
      if (lora_slot >= 0)
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] += my_d[j];
      add_bias(v, bias, off);
      T* dst = kMode == kFused ? static_cast<T*>(a.v_cache) + slot * kv_row + e : row + off;
      *reinterpret_cast<Vec8*>(dst) = pack8<T>(v);
    }
  }
}

template <int kMode>
void launch(const QkvArgs& a, cudaStream_t stream) {
  if (a.n_tokens == 0) return;
  if (a.head_dim % 16 != 0) throw std::invalid_argument("rope/kv write: head_dim must be a multiple of 16");
  if (a.qkv_row_stride % 8 != 0) throw std::invalid_argument("rope/kv write: qkv_row_stride must be a multiple of 8");
  if (a.delta && (kMode != kFused || a.delta_rows == nullptr))
    throw std::invalid_argument("rope/kv write: a delta only with rope_kv_write and its delta_rows");
  if (a.lora.xa) {
    if (kMode != kFused || a.delta)
      throw std::invalid_argument("rope/kv write: a LoRA xa delta only with rope_kv_write, alone");
    lora_xa_delta_check(a.lora, "rope/kv write");
    if (a.lora.n_out != (a.n_heads + 2 * a.n_kv_heads) * a.head_dim)
      throw std::invalid_argument("rope/kv write: the LoRA delta's n_out must be the q|k|v width");
  }
  // RoPE's cos/sin table, then (a LoRA xa delta) the staged deltas of a pass: 16 columns an item.
  const size_t smem = kMode == kWriteOnly ? 0 : sizeof(float) * (a.head_dim + (a.lora.xa ? 16 * kThreads : 0));
  // Work items per token; with fewer tokens than kFewTokens, up to kMaxChunks blocks share a token.
  constexpr int kFewTokens = 64, kMaxChunks = 16;
  const int dv = a.head_dim / 8, items = kMode == kWriteOnly ? 2 * a.n_kv_heads * dv
                                                             : (a.n_heads + a.n_kv_heads) * dv / 2 + a.n_kv_heads * dv;
  const int chunks = a.n_tokens >= kFewTokens ? 1 : std::clamp(ceil_div(items, kThreads), 1, kMaxChunks);
  const dim3 grid(a.n_tokens, chunks);
  if (a.dtype == ScalarType::bf16) {
    launch_pdl(rope_kv_kernel<__nv_bfloat16, kMode>, grid, kThreads, smem, stream, a);
  } else {
#if defined(SERVELAB_KERNELS_FP16)
    launch_pdl(rope_kv_kernel<__half, kMode>, grid, kThreads, smem, stream, a);
#else
    throw std::invalid_argument("rope/kv write: fp16 not built (-DSERVELAB_KERNELS_FP16=ON)");
#endif
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_kv_write(const QkvArgs& a, cudaStream_t stream) { launch<kFused>(a, stream); }
void rope_inplace(const QkvArgs& a, cudaStream_t stream) { launch<kRopeOnly>(a, stream); }
void kv_write(const QkvArgs& a, cudaStream_t stream) { launch<kWriteOnly>(a, stream); }

}  // namespace servelab::kernels
