#pragma once
// One row of RMSNorm finished from registers, shared by kernels/norm.cu (rms_norm, add_rms_norm)
// and the all-reduce fused with the residual add and the norm (kernels/custom_allreduce.cu): the
// same operations in the same order, so the fused path gives the bits of all-reduce then
// add_rms_norm. A block of kNormThreads threads holds a row of up to 8 · kNormThreads · kNormCache
// values (8192), thread t the vectors t + i · kNormThreads; the sum of squares is reduced in a
// fixed order (per thread, then warp shuffles, then warps in order), so a row's result never
// depends on the batch.
#include "kernels/common.cuh"

namespace servelab::kernels {

constexpr int kNormThreads = 256;
constexpr int kNormCache = 4;

/// The block's sum of v (every thread of the block calls it; its shared scratch is reused by the
/// next call only after a __syncthreads()).
__device__ __forceinline__ float norm_block_sum(float v) {
  __shared__ float partial[kNormThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w) total += partial[w];
  return total;
}

/// f[i]: the row's vector v = threadIdx.x + i · kNormThreads (v < nv = d / 8) as stored, wv[i] the
/// weight's; writes out_row[v] = f · rsqrt(mean of squares + eps) · w. Every thread of the block
/// calls it.
template <typename T>
__device__ __forceinline__ void norm_row_from_registers(float (&f)[kNormCache][8], const Vec8 (&wv)[kNormCache],
                                                        int nv, int d, float eps, T* out_row) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormCache; ++i) {
    if (int(threadIdx.x) + i * kNormThreads >= nv) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) ss = fmaf(f[i][j], f[i][j], ss);
  }
  const float inv = rsqrtf(norm_block_sum(ss) / d + eps);
#pragma unroll
  for (int i = 0; i < kNormCache; ++i) {
    const int v = threadIdx.x + i * kNormThreads;
    if (v >= nv) continue;
    float w[8];
    unpack8<T>(wv[i], w);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[i][j] = f[i][j] * inv * w[j];
    *reinterpret_cast<Vec8*>(out_row + v * 8) = pack8<T>(f[i]);
  }
}

}  // namespace servelab::kernels
