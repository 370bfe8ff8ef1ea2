// RoPE fused with the K/V write into an FP8 arena (kv_fp8.h), and the unfused write alone.
// Grid (tokens, chunks) as rope_kv.cu: each block builds the token's cos/sin table, rotates its
// share of the Q heads in place (the bf16 kernel's arithmetic, so Q has the same bits), then each
// warp quantizes whole K or V rows of the token: a row's amax is a warp reduction, so one warp
// owns a row (at head_dim 128 a K row is 8 lanes of rotate-half pairs, a V row 16 lanes of 8
// values). The row is rounded to the dtype first (what the bf16 cache would hold), then scale =
// amax / 448 (1 for an all-zero row), codes = E4M3(x * (1 / scale)) by cvt.rn.satfinite: the CPU
// backend's formula on that row (CpuBackend::store_kv), bit for bit.
#include <cuda_fp8.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/kv_fp8.h"

namespace servelab::kernels {
namespace rope_kv_fp8_detail {  // named: the kernels library may be compiled as unity batches

constexpr int kThreads = 128, kWarps = kThreads / 32;

template <typename T>
__device__ __forceinline__ void add_bias8(float (&f)[8], const T* bias, int off) {
  if (bias == nullptr) return;
  float b[8];
  unpack8<T>(*reinterpret_cast<const Vec8*>(bias + off), b);
#pragma unroll
  for (int j = 0; j < 8; ++j) f[j] += b[j];
}

/// x rounded to T and back (what the bf16 / fp16 cache would store).
template <typename T>
__device__ __forceinline__ float round_t(float x) { return to_float<T>(from_float<T>(x)); }

/// 8 values times inv as 8 E4M3 codes (round to nearest even, saturating) in a uint2.
__device__ __forceinline__ uint2 to_e4m3x8(const float* x, float inv) {
  uint32_t w[2] = {0, 0};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_fp8x2_storage_t two =
        __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(x[2 * j], inv), __fmul_rn(x[2 * j + 1], inv)), __NV_SATFINITE, __NV_E4M3);
    w[j / 2] |= uint32_t(two) << (16 * (j % 2));
  }
  return make_uint2(w[0], w[1]);
}

/// kRotate: the fused kernel (bias, RoPE on Q in place and on K, K/V quantized); else K and V of
/// qkv (already rotated, bias added by rope_inplace) quantized as they are.
template <typename T, bool kRotate>
__global__ void __launch_bounds__(kThreads) rope_kv_fp8_kernel(const QkvArgs a, const Fp8KvLayout lay) {
  extern __shared__ float trig[];  // [half] cos, then [half] sin
  pdl_wait();
  pdl_launch_dependents();
  const int t = blockIdx.x, hd = a.head_dim, half = hd / 2, hv = half / 8, dv = hd / 8;
  T* row = static_cast<T*>(a.qkv) + t * a.qkv_row_stride;
  const T* bias = kRotate ? static_cast<const T*>(a.bias) : nullptr;
  const int64_t slot = a.slot_mapping ? a.slot_mapping[t] : -1;
  if constexpr (kRotate) {
    const float pos = static_cast<float>(a.positions[t]);
    for (int i = threadIdx.x; i < half; i += kThreads) {
      float s, c;
      sincosf(pos * a.inv_freq[i], &s, &c);  // fp32 angle, as rope_kv.cu and transformers
      trig[i] = c;
      trig[half + i] = s;
    }
    __syncthreads();
    for (int w = blockIdx.y * kThreads + threadIdx.x; w < a.n_heads * hv; w += kThreads * gridDim.y) {
      const int head = w / hv, c = (w % hv) * 8, lo = head * hd + c, hi = lo + half;
      float x[8], y[8];
      unpack8<T>(*reinterpret_cast<const Vec8*>(row + lo), x);
      unpack8<T>(*reinterpret_cast<const Vec8*>(row + hi), y);
      add_bias8(x, bias, lo);
      add_bias8(y, bias, hi);
      float rx[8], ry[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float cs = trig[c + j], sn = trig[half + c + j];
        rx[j] = x[j] * cs - y[j] * sn;
        ry[j] = y[j] * cs + x[j] * sn;
      }
      *reinterpret_cast<Vec8*>(row + lo) = pack8<T>(rx);
      *reinterpret_cast<Vec8*>(row + hi) = pack8<T>(ry);
    }
  }
  if (slot < 0) return;  // a padding row: nothing written (no barrier below)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = blockIdx.y * kWarps + warp; r < 2 * a.n_kv_heads; r += kWarps * gridDim.y) {
    const bool is_v = r >= a.n_kv_heads;
    const int h = is_v ? r - a.n_kv_heads : r;
    uint8_t* dst = static_cast<uint8_t*>(is_v ? a.v_cache : a.k_cache);
    float x[8], y[8];  // K: the pair (c, c + half) rotated; V: x alone (y zero)
    bool active;
    const int c = lane * 8;  // this lane's first element of the row (of each half for K)
    if (!is_v) {  // K: lane = a rotate-half pair of vectors
      active = lane < hv;
      if (active) {
        const int lo = (a.n_heads + h) * hd + c, hi = lo + half;
        unpack8<T>(*reinterpret_cast<const Vec8*>(row + lo), x);
        unpack8<T>(*reinterpret_cast<const Vec8*>(row + hi), y);
        add_bias8(x, bias, lo);
        add_bias8(y, bias, hi);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float rx = x[j], ry = y[j];
          if constexpr (kRotate) {
            const float cs = trig[c + j], sn = trig[half + c + j];
            rx = x[j] * cs - y[j] * sn;
            ry = y[j] * cs + x[j] * sn;
          }
          x[j] = round_t<T>(rx);
          y[j] = round_t<T>(ry);
        }
      }
    } else {  // V: lane = one vector of 8
      active = lane < dv;
      if (active) {
        const int off = (a.n_heads + a.n_kv_heads + h) * hd + c;
        unpack8<T>(*reinterpret_cast<const Vec8*>(row + off), x);
        add_bias8(x, bias, off);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          x[j] = round_t<T>(x[j]);
          y[j] = 0.0f;
        }
      }
    }
    float amax = 0.0f;
    if (active)
#pragma unroll
      for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fmaxf(fabsf(x[j]), fabsf(y[j])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f, inv = __fdiv_rn(1.0f, scale);
    if (active) {
      uint8_t* codes = dst + lay.codes_at(slot, h) + c;
      *reinterpret_cast<uint2*>(codes) = to_e4m3x8(x, inv);
      if (!is_v) *reinterpret_cast<uint2*>(codes + half) = to_e4m3x8(y, inv);
    }
    if (lane == 0) *reinterpret_cast<float*>(dst + lay.scale_at(slot, h)) = scale;
  }
}

template <bool kRotate>
void launch(const QkvArgs& a, cudaStream_t stream) {
  if (a.n_tokens == 0) return;
  const char* who = kRotate ? "rope_kv_write_fp8" : "kv_write_fp8";
  if (a.head_dim != 32 && a.head_dim != 64 && a.head_dim != 128)
    throw std::invalid_argument(std::string(who) + ": head_dim " + std::to_string(a.head_dim) + " (32, 64 or 128)");
  if (a.qkv_row_stride % 8 != 0) throw std::invalid_argument(std::string(who) + ": qkv_row_stride must be a multiple of 8");
  const size_t smem = kRotate ? sizeof(float) * a.head_dim : 0;
  constexpr int kFewTokens = 64, kMaxChunks = 16;
  const int q_items = kRotate ? a.n_heads * a.head_dim / 16 : 0;
  const int want = std::max(ceil_div(q_items, kThreads), ceil_div(2 * a.n_kv_heads, kWarps));
  const int chunks = a.n_tokens >= kFewTokens ? 1 : std::clamp(want, 1, kMaxChunks);
  const dim3 grid(a.n_tokens, chunks);
  const Fp8KvLayout lay = Fp8KvLayout::of(a.n_kv_heads, a.head_dim);
  SERVELAB_DISPATCH_16(a.dtype,
                       launch_pdl(rope_kv_fp8_kernel<__nv_bfloat16, kRotate>, grid, kThreads, smem, stream, a, lay),
                       launch_pdl(rope_kv_fp8_kernel<__half, kRotate>, grid, kThreads, smem, stream, a, lay));
  CUDA_CHECK_LAUNCH();
}

}  // namespace rope_kv_fp8_detail

void rope_kv_write_fp8(const QkvArgs& a, cudaStream_t stream) { rope_kv_fp8_detail::launch<true>(a, stream); }
void kv_write_fp8(const QkvArgs& a, cudaStream_t stream) { rope_kv_fp8_detail::launch<false>(a, stream); }

}  // namespace servelab::kernels
