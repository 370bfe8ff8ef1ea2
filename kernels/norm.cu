// RMSNorm, plain and fused with the residual add (each also writing its output in a permuted
// column order, for act-order INT4's products), and the unfused residual add. One block per
// row, 16-byte vectors; the sum of squares is reduced in a fixed order (per thread, then warp
// shuffles, then warps in order), so a row's result never depends on the batch. The norms are
// launched with programmatic dependent launch (launch_pdl, common.cuh): the block first waits for
// the kernel before it, then lets the next kernel (a GEMM streaming its weights) start.
#include <stdexcept>

#include "kernels/common.cuh"
#include "kernels/norm_row.cuh"
#include "kernels/ops.h"

namespace servelab::kernels {
namespace {

constexpr int kThreads = kNormThreads;
constexpr int kCache = kNormCache;

/// The row's vector v (8 values) as a norm reads it: kAdd, residual += x stored rounded to T and
/// read back rounded (the norm sees the stored residual); else src's.
template <typename T, bool kAdd>
__device__ __forceinline__ void row_vector(const T* x, T* residual, const T* src, int64_t base, int v, float (&f)[8]) {
  if (kAdd) {
    float r[8];
    unpack8<T>(*reinterpret_cast<const Vec8*>(x + base + v * 8), f);
    unpack8<T>(*reinterpret_cast<const Vec8*>(residual + base + v * 8), r);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] += r[j];
    const Vec8 packed = pack8<T>(f);
    *reinterpret_cast<Vec8*>(residual + base + v * 8) = packed;
    unpack8<T>(packed, f);
  } else {
    unpack8<T>(*reinterpret_cast<const Vec8*>(src + v * 8), f);
  }
}

/// rsqrt(mean of squares + eps) of the row, its vectors read by row_vector (thread t the vectors
/// t, t + kThreads, ...: the fixed order). Every thread of the block calls it; it ends with
/// norm_block_sum's barrier, after which the residual this block stored is visible to all of it.
template <typename T, bool kAdd>
__device__ __forceinline__ float row_inv_rms(const T* x, T* residual, const T* src, int64_t base, int nv, int d,
                                             float eps) {
  float ss = 0.0f;
  for (int v = threadIdx.x; v < nv; v += kThreads) {
    float f[8];
    row_vector<T, kAdd>(x, residual, src, base, v, f);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss = fmaf(f[j], f[j], ss);
  }
  return rsqrtf(norm_block_sum(ss) / d + eps);
}

/// kAdd: residual += x first (rounded to T, as stored), then normalize the stored residual.
/// The weight vectors are loaded before the PDL wait (they are no earlier kernel's output); a
/// row that fits kCache vectors per thread is normalized from registers (one pass over memory).
template <typename T, bool kAdd>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const T* x, T* residual, const T* weight, T* out, int d,
                                                            float eps) {
  const int nv = d / 8;
  const bool cached = nv <= kThreads * kCache;
  Vec8 wv[kCache];
  if (cached) {
#pragma unroll
    for (int i = 0; i < kCache; ++i) {
      const int v = threadIdx.x + i * kThreads;
      if (v < nv) wv[i] = *reinterpret_cast<const Vec8*>(weight + v * 8);
    }
  }
  pdl_wait();
  pdl_launch_dependents();
  const int64_t base = int64_t(blockIdx.x) * d;
  const T* src = kAdd ? residual + base : x + base;
  if (cached) {
    float f[kCache][8];
#pragma unroll
    for (int i = 0; i < kCache; ++i) {
      const int v = threadIdx.x + i * kThreads;
      if (v >= nv) continue;
      row_vector<T, kAdd>(x, residual, src, base, v, f[i]);
    }
    norm_row_from_registers<T>(f, wv, nv, d, eps, out + base);
    return;
  }
  const float inv = row_inv_rms<T, kAdd>(x, residual, src, base, nv, d, eps);
  for (int v = threadIdx.x; v < nv; v += kThreads) {  // re-read: same thread wrote it, L1/L2 hit
    float f[8], w[8];
    unpack8<T>(*reinterpret_cast<const Vec8*>(src + v * 8), f);
    unpack8<T>(*reinterpret_cast<const Vec8*>(weight + v * 8), w);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = f[j] * inv * w[j];
    *reinterpret_cast<Vec8*>(out + base + v * 8) = pack8<T>(f);
  }
}

/// rms_norm_kernel with the output's columns in perm's order: out[i] = the norm's out[perm[i]], the
/// same operations in the same order (the sum of squares as the uncached path sums it, then
/// f · inv · w rounded), so its bits are the plain kernel's gathered. The residual this block
/// stores is read back at other columns after norm_block_sum's barrier (plain loads: written
/// here, so not through the read-only cache).
template <typename T, bool kAdd>
__global__ void __launch_bounds__(kThreads) rms_norm_perm_kernel(const T* x, T* residual, const T* weight, T* out,
                                                                 const int32_t* perm, int d, float eps) {
  const int nv = d / 8;
  pdl_wait();
  pdl_launch_dependents();
  const int64_t base = int64_t(blockIdx.x) * d;
  const T* src = kAdd ? residual + base : x + base;
  const float inv = row_inv_rms<T, kAdd>(x, residual, src, base, nv, d, eps);
  for (int v = threadIdx.x; v < nv; v += kThreads) {
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int k = __ldg(perm + v * 8 + j);
      o[j] = to_float<T>(src[k]) * inv * to_float<T>(__ldg(weight + k));
    }
    *reinterpret_cast<Vec8*>(out + base + v * 8) = pack8<T>(o);
  }
}

template <typename T>
__global__ void residual_add_kernel(const T* x, T* residual, int64_t n_vec) {
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < n_vec; v += int64_t(gridDim.x) * blockDim.x) {
    float a[8], b[8];
    unpack8<T>(*reinterpret_cast<const Vec8*>(x + v * 8), a);
    unpack8<T>(*reinterpret_cast<const Vec8*>(residual + v * 8), b);
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] += b[j];
    *reinterpret_cast<Vec8*>(residual + v * 8) = pack8<T>(a);
  }
}

void check_width(int d) {
  if (d % 8 != 0) throw std::invalid_argument("rms_norm: d must be a multiple of 8");
}

template <typename T, bool kAdd>
void launch_norm(const void* x, void* residual, const void* weight, void* out, int n_rows, int d, float eps,
                 cudaStream_t stream) {
  launch_pdl(rms_norm_kernel<T, kAdd>, n_rows, kThreads, 0, stream, static_cast<const T*>(x), static_cast<T*>(residual),
             static_cast<const T*>(weight), static_cast<T*>(out), d, eps);
}

template <typename T, bool kAdd>
void launch_norm_perm(const void* x, void* residual, const void* weight, void* out, const int32_t* perm, int n_rows,
                      int d, float eps, cudaStream_t stream) {
  if (!perm) throw std::invalid_argument("rms_norm_permuted: perm must be set");
  launch_pdl(rms_norm_perm_kernel<T, kAdd>, n_rows, kThreads, 0, stream, static_cast<const T*>(x),
             static_cast<T*>(residual), static_cast<const T*>(weight), static_cast<T*>(out), perm, d, eps);
}

}  // namespace

void rms_norm_permuted(ScalarType t, const void* x, const void* weight, void* out, const int32_t* perm, int n_rows,
                       int d, float eps, cudaStream_t stream) {
  check_width(d);
  if (n_rows == 0) return;
  SERVELAB_DISPATCH_16(t, (launch_norm_perm<__nv_bfloat16, false>(x, nullptr, weight, out, perm, n_rows, d, eps, stream)),
                       (launch_norm_perm<__half, false>(x, nullptr, weight, out, perm, n_rows, d, eps, stream)));
}

void add_rms_norm_permuted(ScalarType t, const void* x, void* residual, const void* weight, void* out,
                           const int32_t* perm, int n_rows, int d, float eps, cudaStream_t stream) {
  check_width(d);
  if (n_rows == 0) return;
  SERVELAB_DISPATCH_16(t, (launch_norm_perm<__nv_bfloat16, true>(x, residual, weight, out, perm, n_rows, d, eps, stream)),
                       (launch_norm_perm<__half, true>(x, residual, weight, out, perm, n_rows, d, eps, stream)));
}

void rms_norm(ScalarType t, const void* x, const void* weight, void* out, int n_rows, int d, float eps,
              cudaStream_t stream) {
  check_width(d);
  if (n_rows == 0) return;
  SERVELAB_DISPATCH_16(t, (launch_norm<__nv_bfloat16, false>(x, nullptr, weight, out, n_rows, d, eps, stream)),
                       (launch_norm<__half, false>(x, nullptr, weight, out, n_rows, d, eps, stream)));
}

void add_rms_norm(ScalarType t, const void* x, void* residual, const void* weight, void* out, int n_rows, int d,
                  float eps, cudaStream_t stream) {
  check_width(d);
  if (n_rows == 0) return;
  SERVELAB_DISPATCH_16(t, (launch_norm<__nv_bfloat16, true>(x, residual, weight, out, n_rows, d, eps, stream)),
                       (launch_norm<__half, true>(x, residual, weight, out, n_rows, d, eps, stream)));
}

void residual_add(ScalarType t, const void* x, void* residual, int64_t n, cudaStream_t stream) {
  if (n % 8 != 0) throw std::invalid_argument("residual_add: n must be a multiple of 8");
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(n / 8, 256), 4096));
  SERVELAB_DISPATCH_16(
      t,
      (residual_add_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(x),
                                                                     static_cast<__nv_bfloat16*>(residual), n / 8)),
      (residual_add_kernel<__half><<<blocks, 256, 0, stream>>>(static_cast<const __half*>(x),
                                                              static_cast<__half*>(residual), n / 8)));
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
