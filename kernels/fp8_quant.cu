// FP8 E4M3 quantization kernels (fp8_quant.h): one block per row; the row's amax is a block
// reduction, the codes are written 8 at a time (cvt.rn.satfinite.e4m3x2: round to nearest even,
// saturating at ±448, as f32_to_fp8_e4m3 in engine/model/fp8.h).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/fp8_quant.h"

namespace servelab::kernels {
namespace fp8_quant_detail {  // named: the kernels library may be compiled as unity batches

constexpr int kThreads = 256;
constexpr float kE4m3Max = 448.0f;

/// Largest |x| of a bf16 row of k values (k a multiple of 8), over the block.
__device__ float row_amax(const __nv_bfloat16* row, int k) {
  __shared__ float warp_max[kThreads / 32];
  float m = 0.0f;
  for (int i = threadIdx.x * 8; i < k; i += kThreads * 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + i);
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(p[j]);
      m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  float r = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) r = fmaxf(r, warp_max[w]);
  return r;
}

__device__ __forceinline__ float scale_of(float amax) { return amax > 0.0f ? amax / kE4m3Max : 1.0f; }

/// Per tensor, first pass: the step's amax (max over rows; non-negative floats order as ints).
__global__ void __launch_bounds__(kThreads) amax_kernel(const __nv_bfloat16* x, int64_t stride, int k, float* amax) {
  const float m = row_amax(x + blockIdx.x * stride, k);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}

/// kMode 0: per token (the row's own amax); 1: per tensor (*amax); 2: given scales[row] (weights);
/// 3: `fixed` (static activations).
template <int kMode>
__global__ void __launch_bounds__(kThreads) codes_kernel(const __nv_bfloat16* x, int64_t stride, int k,
                                                         const float* amax, float* scales, uint8_t* codes,
                                                         float fixed = 0.0f) {
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* row = x + r * stride;
  float scale;
  if constexpr (kMode == 0) scale = scale_of(row_amax(row, k));
  else if constexpr (kMode == 1) scale = scale_of(*amax);
  else if constexpr (kMode == 3) scale = fixed;
  else scale = scales[r];
  if (kMode != 2 && threadIdx.x == 0) scales[r] = scale;
  const float inv = 1.0f / scale;
  uint8_t* out = codes + r * k;
  for (int i = threadIdx.x * 8; i < k; i += kThreads * 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(row + i);
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
    uint32_t packed[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(p[j]);
      const __nv_fp8x2_storage_t two =
          __nv_cvt_float2_to_fp8x2(make_float2(f.x * inv, f.y * inv), __NV_SATFINITE, __NV_E4M3);
      packed[j / 2] |= uint32_t(two) << (16 * (j % 2));
    }
    *reinterpret_cast<uint2*>(out + i) = make_uint2(packed[0], packed[1]);
  }
}

/// Weights at load: each row's amax into amax[row].
__global__ void __launch_bounds__(kThreads) row_amax_kernel(const __nv_bfloat16* x, int k, float* amax) {
  const float m = row_amax(x + int64_t(blockIdx.x) * k, k);
  if (threadIdx.x == 0) amax[blockIdx.x] = m;
}

}  // namespace fp8_quant_detail

void validate(const Fp8QuantizeArgs& a) {
  auto bad = [](const std::string& what) { return std::invalid_argument("quantize_fp8_activations: " + what); };
  if (a.m < 0) throw bad("m must be >= 0 (got " + std::to_string(a.m) + ")");
  if (a.k < 8 || a.k % 8) throw bad("k (" + std::to_string(a.k) + ") must be a positive multiple of 8");
  if (a.x_stride < a.k || a.x_stride % 8) throw bad("x_stride must be >= k and a multiple of 8");
  if (!a.x || !a.codes || !a.row_scales) throw bad("x, codes and row_scales must be set");
  if (a.scales == Fp8ActScales::per_tensor && !a.amax) throw bad("per-tensor scales need the amax scratch");
  if (a.scales == Fp8ActScales::fixed && !(a.fixed_scale > 0.0f && a.fixed_scale < INFINITY))
    throw bad("a fixed scale must be > 0 and finite (got " + std::to_string(a.fixed_scale) + ")");
}

void quantize_fp8_activations(const Fp8QuantizeArgs& a, cudaStream_t stream) {
  using namespace fp8_quant_detail;
  validate(a);
  if (a.m == 0) return;
  const auto* x = static_cast<const __nv_bfloat16*>(a.x);
  if (a.scales == Fp8ActScales::per_token) {
    codes_kernel<0><<<a.m, kThreads, 0, stream>>>(x, a.x_stride, a.k, nullptr, a.row_scales, a.codes);
  } else if (a.scales == Fp8ActScales::fixed) {
    codes_kernel<3><<<a.m, kThreads, 0, stream>>>(x, a.x_stride, a.k, nullptr, a.row_scales, a.codes, a.fixed_scale);
  } else {
    CUDA_CHECK(cudaMemsetAsync(a.amax, 0, sizeof(float), stream));
    amax_kernel<<<a.m, kThreads, 0, stream>>>(x, a.x_stride, a.k, a.amax);
    codes_kernel<1><<<a.m, kThreads, 0, stream>>>(x, a.x_stride, a.k, a.amax, a.row_scales, a.codes);
  }
  CUDA_CHECK_LAUNCH();
}

void quantize_fp8_weight(const void* w, int64_t rows, int64_t cols, const std::vector<int64_t>& runs,
                         bool per_channel, uint8_t* codes, float* scales) {
  using namespace fp8_quant_detail;
  if (rows < 1 || cols < 8 || cols % 8)
    throw std::invalid_argument("quantize_fp8_weight: [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                "] needs rows >= 1 and cols a positive multiple of 8");
  if (rows > (int64_t(1) << 31) - 1) throw std::invalid_argument("quantize_fp8_weight: too many rows");
  int64_t total = 0;
  for (int64_t r : runs) total += r;
  if (!per_channel && total != rows)
    throw std::invalid_argument("quantize_fp8_weight: runs cover " + std::to_string(total) + " rows of " +
                                std::to_string(rows));
  const auto* x = static_cast<const __nv_bfloat16*>(w);
  row_amax_kernel<<<unsigned(rows), kThreads>>>(x, int(cols), scales);
  CUDA_CHECK_LAUNCH();
  std::vector<float> s(static_cast<size_t>(rows));
  CUDA_CHECK(cudaMemcpy(s.data(), scales, s.size() * sizeof(float), cudaMemcpyDeviceToHost));
  // The scale of each row: its own amax / 448, or its run's (the CPU's quantize_fp8 formula).
  auto scale_for = [](float amax) { return amax > 0.0f ? amax / kE4m3Max : 1.0f; };
  if (per_channel) {
    for (float& v : s) v = scale_for(v);
  } else {
    int64_t first = 0;
    for (int64_t n : runs) {
      const float m = *std::max_element(s.begin() + first, s.begin() + first + n);
      std::fill(s.begin() + first, s.begin() + first + n, scale_for(m));
      first += n;
    }
  }
  CUDA_CHECK(cudaMemcpy(scales, s.data(), s.size() * sizeof(float), cudaMemcpyHostToDevice));
  codes_kernel<2><<<unsigned(rows), kThreads>>>(x, cols, int(cols), nullptr, scales, codes);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace servelab::kernels
