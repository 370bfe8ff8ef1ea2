#pragma once
// The residual add and RMSNorm folded into gemv (gemv.cu; gemv_plan.h's ResidualOut and NormIn).
// Producer (ResidualOut): thread (mm = warp, r = lane) of the block finishing row block b holds
// output (mm, 32 b + r); it stores h = round(round(sum) + h), the bits add_rms_norm stores (the
// product rounded as a stored delta, then added), and the warp's shuffle tree leaves the sum of
// the 32 new values' squares in ss[mm][b]. Consumer (NormIn): warp w of every block adds row w's
// ss over the producer's row blocks (lane j the blocks j, j + 32, ... in order, then a shuffle
// tree): every block gets the same inv = rsqrt(mean + eps), and each x vector loaded becomes
// round(x · inv · weight), as the norm kernel writes xn. Only the sum's order differs from
// add_rms_norm (a row's result still never depends on the batch).
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/gemv_plan.h"

namespace servelab::kernels::gemv {

/// Where a lane's x vectors come from: x itself, or h normalized on the load.
template <typename T>
struct XSource {
  const T* x = nullptr;   ///< this lane's row of x (or h) at its first K value
  const T* w = nullptr;   ///< the norm's weight at the same K value; null: no norm
  float inv = 0.0f;       ///< the row's 1 / rms
  __device__ __forceinline__ Vec8 load(int kv) const {
    const Vec8 v = __ldg(reinterpret_cast<const Vec8*>(x + kv));
    if (w == nullptr) return v;
    float f[8], g[8];
    unpack8<T>(v, f);
    unpack8<T>(__ldg(reinterpret_cast<const Vec8*>(w + kv)), g);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = f[j] * inv * g[j];
    return pack8<T>(f);
  }
};

/// The consumer's 1 / rms of x row `row` (< m) from a ResidualOut's ss of a k-wide h: every
/// thread of the block calls it after the PDL wait (it synchronizes the block).
__device__ __forceinline__ float norm_inv(const NormIn& n, int m, int k, int row) {
  __shared__ float inv[kMaxRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, blocks = (k + kBlockRows - 1) / kBlockRows;
  if (warp < m) {
    float t = 0.0f;
    for (int j = lane; j < blocks; j += 32) t += n.ss[warp * kNormSsBlocks + j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (lane == 0) inv[warp] = rsqrtf(t / k + n.eps);
  }
  __syncthreads();
  return inv[row];
}

/// The producer's store (see above): thread (mm = warp, r = lane) of row block b; every thread
/// of the block calls it.
template <typename T>
__device__ __forceinline__ void residual_store(const ResidualOut& o, float sum, int m, int n, int b) {
  const int lane = threadIdx.x & 31, mm = threadIdx.x >> 5, nn = b * kBlockRows + lane;
  float v = 0.0f;
  if (mm < m && nn < n) {
    T* h = static_cast<T*>(o.h) + int64_t(mm) * n + nn;
    const T stored = from_float<T>(to_float<T>(from_float<T>(sum)) + to_float<T>(*h));
    *h = stored;
    v = to_float<T>(stored);
  }
  float sq = v * v;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
  if (lane == 0 && mm < m) o.ss[mm * kNormSsBlocks + b] = sq;
}

}  // namespace servelab::kernels::gemv
