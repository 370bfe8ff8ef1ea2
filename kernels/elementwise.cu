// SiLU-and-multiply over the merged gate/up projection (fused, and the unfused two-kernel
// sequence for `fusion: off`), and the embedding gather. Grid-stride
// loops over 16-byte vectors: memory-bound, one read and one write per element. silu_mul and
// embedding are launched with programmatic dependent launch (launch_pdl): they wait for their
// predecessor at the top and let the next kernel's blocks start at once.
#include <algorithm>
#include <cstdlib>

#include "kernels/common.cuh"
#include "kernels/ops.h"
#include "kernels/silu_mul_rows.cuh"
#include "kernels/silu.cuh"

namespace servelab::kernels {
namespace {

template <typename T>
__global__ void silu_mul_kernel(const T* gate_up, T* out, int ffn, int64_t n_vec) {
  pdl_wait();
  pdl_launch_dependents();
  silu_mul_rows<T, false>(gate_up, nullptr, nullptr, out, ffn, n_vec);
}

/// Unfused activation, step 1: out = silu(gate), stored (rounded) like any intermediate.
template <typename T>
__global__ void silu_kernel(const T* gate_up, T* out, int ffn, int64_t n_vec) {
  const int vpr = ffn / 8;
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < n_vec; v += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = v / vpr, c = (v % vpr) * 8;
    float g[8];
    unpack8<T>(*reinterpret_cast<const Vec8*>(gate_up + r * 2 * ffn + c), g);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] = silu_f(g[j]);
    *reinterpret_cast<Vec8*>(out + r * ffn + c) = pack8<T>(g);
  }
}

/// Unfused activation, step 2: out *= up.
template <typename T>
__global__ void mul_up_kernel(const T* gate_up, T* out, int ffn, int64_t n_vec) {
  const int vpr = ffn / 8;
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < n_vec; v += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = v / vpr, c = (v % vpr) * 8;
    float a[8], u[8];
    unpack8<T>(*reinterpret_cast<const Vec8*>(out + r * ffn + c), a);
    unpack8<T>(*reinterpret_cast<const Vec8*>(gate_up + r * 2 * ffn + ffn + c), u);
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] *= u[j];
    *reinterpret_cast<Vec8*>(out + r * ffn + c) = pack8<T>(a);
  }
}

template <typename T>
__global__ void embedding_kernel(const T* table, const int32_t* ids, T* out, int d, int64_t n_vec) {
  pdl_wait();
  pdl_launch_dependents();
  const int vpr = d / 8;
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < n_vec; v += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = v / vpr, c = (v % vpr) * 8;
    *reinterpret_cast<Vec8*>(out + t * d + c) = *reinterpret_cast<const Vec8*>(table + int64_t(ids[t]) * d + c);
  }
}

int grid_for(int64_t n_vec) { return static_cast<int>(std::clamp<int64_t>(ceil_div(n_vec, 256), 1, 8192)); }

bool& pdl_flag() {  // per host thread: each tensor-parallel rank's thread sets its own
  thread_local bool on = true;
  return on;
}

}  // namespace

bool pdl_enabled() { return pdl_flag(); }
void set_pdl_enabled(bool on) { pdl_flag() = on; }

void silu_mul(ScalarType t, const void* gate_up, void* out, int n_rows, int ffn, cudaStream_t stream) {
  if (ffn % 8 != 0) throw std::invalid_argument("silu_mul: ffn must be a multiple of 8");
  const int64_t n_vec = int64_t(n_rows) * ffn / 8;
  if (n_vec == 0) return;
  SERVELAB_DISPATCH_16(t,
                       launch_pdl(silu_mul_kernel<__nv_bfloat16>, grid_for(n_vec), 256, 0, stream,
                                  static_cast<const __nv_bfloat16*>(gate_up), static_cast<__nv_bfloat16*>(out), ffn, n_vec),
                       launch_pdl(silu_mul_kernel<__half>, grid_for(n_vec), 256, 0, stream,
                                  static_cast<const __half*>(gate_up), static_cast<__half*>(out), ffn, n_vec));
}

void silu_then_mul(ScalarType t, const void* gate_up, void* out, int n_rows, int ffn, cudaStream_t stream) {
  if (ffn % 8 != 0) throw std::invalid_argument("silu_then_mul: ffn must be a multiple of 8");
  const int64_t n_vec = int64_t(n_rows) * ffn / 8;
  if (n_vec == 0) return;
  SERVELAB_DISPATCH_16(t,
                       (silu_kernel<__nv_bfloat16><<<grid_for(n_vec), 256, 0, stream>>>(
                           static_cast<const __nv_bfloat16*>(gate_up), static_cast<__nv_bfloat16*>(out), ffn, n_vec)),
                       (silu_kernel<__half><<<grid_for(n_vec), 256, 0, stream>>>(
                           static_cast<const __half*>(gate_up), static_cast<__half*>(out), ffn, n_vec)));
  CUDA_CHECK_LAUNCH();
  SERVELAB_DISPATCH_16(t,
                       (mul_up_kernel<__nv_bfloat16><<<grid_for(n_vec), 256, 0, stream>>>(
                           static_cast<const __nv_bfloat16*>(gate_up), static_cast<__nv_bfloat16*>(out), ffn, n_vec)),
                       (mul_up_kernel<__half><<<grid_for(n_vec), 256, 0, stream>>>(
                           static_cast<const __half*>(gate_up), static_cast<__half*>(out), ffn, n_vec)));
  CUDA_CHECK_LAUNCH();
}

void embedding(ScalarType t, const void* table, const int32_t* ids, void* out, int n_tokens, int d,
               cudaStream_t stream) {
  if (d % 8 != 0) throw std::invalid_argument("embedding: d must be a multiple of 8");
  const int64_t n_vec = int64_t(n_tokens) * d / 8;
  if (n_vec == 0) return;
  SERVELAB_DISPATCH_16(t,
                       launch_pdl(embedding_kernel<__nv_bfloat16>, grid_for(n_vec), 256, 0, stream,
                                  static_cast<const __nv_bfloat16*>(table), ids, static_cast<__nv_bfloat16*>(out), d, n_vec),
                       launch_pdl(embedding_kernel<__half>, grid_for(n_vec), 256, 0, stream,
                                  static_cast<const __half*>(table), ids, static_cast<__half*>(out), d, n_vec));
}

}  // namespace servelab::kernels
