// lora_run_shrink (lora_run_shrink.h): a run's shrink on the tensor cores. Block (row tile of 16,
// K split): 4 warps, each taking every 4th k-step of 16 of the split, mma.sync m16n8k16 with the
// fragments loaded from global memory (A's rows, the adapter's, are the B operand: B[k][n] =
// A[n][k], so both operands are row-major 32-bit pairs); the warps' sums meet in shared memory.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/lora_run_shrink.h"
#include "kernels/mma_util.cuh"

namespace servelab::kernels {
namespace {

constexpr int kWarps = 4, kTileRows = 16, kTargetBlocks = 264;

struct Split {
  int row_tiles, steps, steps_per_block, k_split;
};

Split split_of(int n_in, int rows) {
  Split s;
  s.row_tiles = (rows + kTileRows - 1) / kTileRows;
  s.steps = n_in / 16;
  const int want = std::clamp((kTargetBlocks + s.row_tiles - 1) / std::max(s.row_tiles, 1), 1,
                              std::max(s.steps / kWarps, 1));
  s.steps_per_block = (s.steps + want - 1) / want;
  s.k_split = (s.steps + s.steps_per_block - 1) / s.steps_per_block;
  return s;
}

__device__ __forceinline__ uint32_t ld_pair(const void* p) { return __ldg(static_cast<const uint32_t*>(p)); }

template <typename T, int NT>
__global__ void __launch_bounds__(kWarps * 32) lora_run_shrink_kernel(const T* __restrict__ x, const T* __restrict__ a,
                                                                       int n_in, int rows, Split sp, float scale,
                                                                       float* partial, int32_t* counters, T* xa) {
  constexpr int W = NT * 8;
  __shared__ float red[kWarps][kTileRows][W];
  __shared__ bool last;
  const int tile = blockIdx.x, split = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int row0 = tile * kTileRows, ra = row0 + g, rb = ra + 8;
  const bool va = ra < rows, vb = rb < rows;
  const T* xr_a = x + int64_t(va ? ra : 0) * n_in + 2 * t;
  const T* xr_b = x + int64_t(vb ? rb : 0) * n_in + 2 * t;
  const T* ar = a + int64_t(g) * n_in + 2 * t;
  float acc[NT][4] = {};
  const int s0 = split * sp.steps_per_block, s1 = min(s0 + sp.steps_per_block, sp.steps);
#pragma unroll 2
  for (int s = s0 + warp; s < s1; s += kWarps) {
    const int k = s * 16;
    const uint32_t a0 = va ? ld_pair(xr_a + k) : 0u, a1 = vb ? ld_pair(xr_b + k) : 0u;
    const uint32_t a2 = va ? ld_pair(xr_a + k + 8) : 0u, a3 = vb ? ld_pair(xr_b + k + 8) : 0u;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const T* an = ar + int64_t(n) * 8 * n_in + k;
      mma_16816<T>(acc[n], a0, a1, a2, a3, ld_pair(an), ld_pair(an + 8));
    }
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    red[warp][g][n * 8 + 2 * t] = acc[n][0];
    red[warp][g][n * 8 + 2 * t + 1] = acc[n][1];
    red[warp][g + 8][n * 8 + 2 * t] = acc[n][2];
    red[warp][g + 8][n * 8 + 2 * t + 1] = acc[n][3];
  }
  __syncthreads();
  const float* flat = &red[0][0][0];
  constexpr int kTile = kTileRows * W;
  if (sp.k_split == 1) {  // the block holds the whole sum
    for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
      const int r = i / W, c = i % W;
      if (row0 + r < rows)
        xa[int64_t(row0 + r) * W + c] =
            T(scale * (flat[i] + flat[kTile + i] + flat[2 * kTile + i] + flat[3 * kTile + i]));
    }
    return;
  }
  float* mine = partial + (int64_t(split) * sp.row_tiles + tile) * kTile;
  for (int i = threadIdx.x; i < kTile; i += blockDim.x)
    mine[i] = flat[i] + flat[kTile + i] + flat[2 * kTile + i] + flat[3 * kTile + i];
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&counters[tile], 1) == sp.k_split - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
    const int r = i / W, c = i % W;
    if (row0 + r >= rows) continue;
    float v = 0.0f;
    for (int j = 0; j < sp.k_split; ++j) v += __ldcg(partial + (int64_t(j) * sp.row_tiles + tile) * kTile + i);
    xa[int64_t(row0 + r) * W + c] = T(scale * v);
  }
  if (threadIdx.x == 0) counters[tile] = 0;
}

template <typename T>
void launch(const void* x, const LoraPool& pool, const LoraRun& run, float scale, void* xa, float* partial,
            int32_t* counters, cudaStream_t stream) {
  const int total = pool.total_rank();
  const Split sp = split_of(pool.n_in, run.count);
  const T* xr = static_cast<const T*>(x) + int64_t(run.first) * pool.n_in;
  const T* a = static_cast<const T*>(pool.a) + int64_t(run.slot) * total * pool.n_in;
  T* out = static_cast<T*>(xa) + int64_t(run.first) * total;
  const dim3 grid(unsigned(sp.row_tiles), unsigned(sp.k_split));
  switch (total / 8) {
    case 2: lora_run_shrink_kernel<T, 2><<<grid, kWarps * 32, 0, stream>>>(xr, a, pool.n_in, run.count, sp, scale, partial, counters, out); break;
    case 4: lora_run_shrink_kernel<T, 4><<<grid, kWarps * 32, 0, stream>>>(xr, a, pool.n_in, run.count, sp, scale, partial, counters, out); break;
    case 6: lora_run_shrink_kernel<T, 6><<<grid, kWarps * 32, 0, stream>>>(xr, a, pool.n_in, run.count, sp, scale, partial, counters, out); break;
    default: lora_run_shrink_kernel<T, 8><<<grid, kWarps * 32, 0, stream>>>(xr, a, pool.n_in, run.count, sp, scale, partial, counters, out); break;
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool lora_run_shrink_supported(const LoraPool& pool) {
  const int total = pool.total_rank();
  return total % 16 == 0 && total >= 16 && total <= 64 && pool.n_in % 16 == 0 && pool.n_in > 0;
}

size_t lora_run_shrink_partial_floats(const LoraPool& pool, int rows) {
  const Split sp = split_of(pool.n_in, std::max(rows, 1));
  return size_t(sp.k_split) * size_t(sp.row_tiles) * kTileRows * size_t(pool.total_rank());
}

int lora_run_shrink_counters(int rows) { return (std::max(rows, 1) + kTileRows - 1) / kTileRows; }

void lora_run_shrink(ScalarType t, const void* x, const LoraPool& pool, const LoraRun& run, float scale, void* xa,
                     float* partial, int32_t* counters, cudaStream_t stream) {
  check_lora_pool(pool, "lora_run_shrink");
  if (!lora_run_shrink_supported(pool))
    throw std::invalid_argument("lora_run_shrink: total rank " + std::to_string(pool.total_rank()) + " and n_in " +
                                std::to_string(pool.n_in) + " outside what it takes (16..64 by 16; n_in % 16 == 0)");
  if (run.slot < 0 || run.slot >= pool.n_slots || run.first < 0 || run.count < 0)
    throw std::invalid_argument("lora_run_shrink: run outside the pool's " + std::to_string(pool.n_slots) + " slots");
  if (run.count == 0) return;
  SERVELAB_DISPATCH_16(t, (launch<__nv_bfloat16>(x, pool, run, scale, xa, partial, counters, stream)),
                       (launch<__half>(x, pool, run, scale, xa, partial, counters, stream)));
}

}  // namespace servelab::kernels
