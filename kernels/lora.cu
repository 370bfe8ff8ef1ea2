// Batched LoRA shrink and expand for a step mixing adapters (kernels/lora.h; reference
// kernels/ref/lora_ref.h). Decode-sized steps are memory-bound on the adapter weights, so both
// kernels read each needed row of A or B once per row of x with 16-byte loads:
// - shrink: a block per (row, group of 8 ranks), a warp per rank: the warp's dot product of x's
//   row with A[slot, k] over n_in, reduced by shuffles; scale applied once.
// - expand: a block per (row, 256 output columns), xa's row staged in shared memory; each thread
//   one column, reading B[slot, c, :] (max_rank contiguous values) and adding into y once.
// Rows whose slot is -1 (no adapter, padding) return at once: shrink writes their zeros.
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/lora.h"

namespace servelab::kernels {
namespace {

constexpr int kShrinkWarps = 8;
constexpr int kExpandThreads = 256;

template <typename T>
__global__ void lora_shrink_kernel(const T* x, const int32_t* row_slot, const T* a, const float* scale, int n_in,
                                   int max_rank, float* xa) {
  const int r = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k = blockIdx.y * kShrinkWarps + warp;
  if (k >= max_rank) return;
  const int s = row_slot[r];
  if (s < 0) {
    if (lane == 0) xa[int64_t(r) * max_rank + k] = 0.0f;
    return;
  }
  const T* xr = x + int64_t(r) * n_in;
  const T* ak = a + (int64_t(s) * max_rank + k) * n_in;
  float acc = 0.0f;
  for (int i = lane * 8; i < n_in; i += 32 * 8) {
    float xf[8], af[8];
    unpack8<T>(*reinterpret_cast<const Vec8*>(xr + i), xf);
    unpack8<T>(*reinterpret_cast<const Vec8*>(ak + i), af);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc += xf[j] * af[j];
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) xa[int64_t(r) * max_rank + k] = acc * scale[s];
}

template <typename T>
__global__ void lora_expand_kernel(const float* xa, const int32_t* row_slot, const T* b, int n_out, int max_rank, T* y,
                                   int ld_y, int c0) {
  __shared__ float xs[kLoraMaxRank];
  const int r = blockIdx.x;
  const int s = row_slot[r];
  if (s < 0) return;
  for (int k = threadIdx.x; k < max_rank; k += blockDim.x) xs[k] = xa[int64_t(r) * max_rank + k];
  __syncthreads();
  const int c = blockIdx.y * kExpandThreads + threadIdx.x;
  if (c >= n_out) return;
  const T* bc = b + (int64_t(s) * n_out + c) * max_rank;
  float acc = 0.0f;
  for (int k = 0; k < max_rank; ++k) acc += xs[k] * to_float<T>(bc[k]);
  T* out = y + int64_t(r) * ld_y + c0 + c;
  *out = from_float<T>(to_float<T>(*out) + acc);
}

void check_pool(const LoraPool& p, const char* who) {
  if (p.max_rank < 1 || p.max_rank > kLoraMaxRank)
    throw std::invalid_argument(std::string(who) + ": max_rank " + std::to_string(p.max_rank) + " outside [1, " +
                                std::to_string(kLoraMaxRank) + "]");
  if (p.n_in % 8 != 0) throw std::invalid_argument(std::string(who) + ": n_in must be a multiple of 8");
}

}  // namespace

void lora_shrink(ScalarType t, const void* x, const int32_t* row_slot, int n_rows, const LoraPool& pool, float* xa,
                 cudaStream_t stream) {
  check_pool(pool, "lora_shrink");
  if (n_rows == 0) return;
  const dim3 grid(n_rows, (pool.max_rank + kShrinkWarps - 1) / kShrinkWarps);
  SERVELAB_DISPATCH_16(t,
                       (lora_shrink_kernel<__nv_bfloat16><<<grid, kShrinkWarps * 32, 0, stream>>>(
                           static_cast<const __nv_bfloat16*>(x), row_slot, static_cast<const __nv_bfloat16*>(pool.a),
                           pool.scale, pool.n_in, pool.max_rank, xa)),
                       (lora_shrink_kernel<__half><<<grid, kShrinkWarps * 32, 0, stream>>>(
                           static_cast<const __half*>(x), row_slot, static_cast<const __half*>(pool.a), pool.scale,
                           pool.n_in, pool.max_rank, xa)));
  CUDA_CHECK_LAUNCH();
}

void lora_expand(ScalarType t, const float* xa, const int32_t* row_slot, int n_rows, const LoraPool& pool, void* y,
                 int ld_y, int c0, cudaStream_t stream) {
  check_pool(pool, "lora_expand");
  if (n_rows == 0 || pool.n_out == 0) return;
  const dim3 grid(n_rows, (pool.n_out + kExpandThreads - 1) / kExpandThreads);
  SERVELAB_DISPATCH_16(t,
                       (lora_expand_kernel<__nv_bfloat16><<<grid, kExpandThreads, 0, stream>>>(
                           xa, row_slot, static_cast<const __nv_bfloat16*>(pool.b), pool.n_out, pool.max_rank,
                           static_cast<__nv_bfloat16*>(y), ld_y, c0)),
                       (lora_expand_kernel<__half><<<grid, kExpandThreads, 0, stream>>>(
                           xa, row_slot, static_cast<const __half*>(pool.b), pool.n_out, pool.max_rank,
                           static_cast<__half*>(y), ld_y, c0)));
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
