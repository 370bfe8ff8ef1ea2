#pragma once
// The grouped shrink's work items (kernels/lora_sgmv.h), shared by lora_sgmv_shrink's kernel and
// the gemv that runs the shrink in its own first blocks (LoraSgmvConfig::in_product, gemv.cu).
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/lora_sgmv.h"

namespace servelab::kernels::lora_detail {

constexpr int kSgmvWarps = 8;         // shrink: warps per block
constexpr int kSgmvRanksPerWarp = 2;  // shrink: ranks a warp carries at once (A in registers)
constexpr int kShrinkMaxChunks = 16;  // chunks a product's input is cut into at most (lora_chunk_len)

/// The shrink of n (1..kLoraTileRows) rows of slot s, perm positions p0 .. p0 + n - 1, over one
/// chunk: warps take kSgmvRanksPerWarp ranks at a time; each lane holds 8 inputs of those ranks'
/// A rows and of each row's x per pass, the warp's sums reduced by shuffles, into
/// partial[chunk, p0 .., ranks].
template <typename T>
__device__ __forceinline__ void shrink_rows(const T* x, const int32_t* perm, int n_rows, const T* a, int n_in,
                                            int total, int chunk_len, float* partial, int s, int p0, int n,
                                            int chunk) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i_begin = chunk * chunk_len, i_end = min(n_in, i_begin + chunk_len);
  const T* xr[kLoraTileRows];
#pragma unroll
  for (int r = 0; r < kLoraTileRows; ++r) xr[r] = x + int64_t(perm[p0 + min(r, n - 1)]) * n_in;
  float* out = partial + (int64_t(chunk) * n_rows + p0) * total;
  for (int k0 = warp * kSgmvRanksPerWarp; k0 < total; k0 += kSgmvWarps * kSgmvRanksPerWarp) {
    float acc[kSgmvRanksPerWarp][kLoraTileRows] = {};
    const T* ak[kSgmvRanksPerWarp];
#pragma unroll
    for (int kk = 0; kk < kSgmvRanksPerWarp; ++kk) ak[kk] = a + (int64_t(s) * total + min(k0 + kk, total - 1)) * n_in;
    for (int i = i_begin + lane * 8; i < i_end; i += 32 * 8) {
      float af[kSgmvRanksPerWarp][8];
#pragma unroll
      for (int kk = 0; kk < kSgmvRanksPerWarp; ++kk) unpack8<T>(*reinterpret_cast<const Vec8*>(ak[kk] + i), af[kk]);
#pragma unroll
      for (int r = 0; r < kLoraTileRows; ++r) {
        if (r >= n) break;  // uniform over the block
        float xf[8];
        unpack8<T>(*reinterpret_cast<const Vec8*>(xr[r] + i), xf);
#pragma unroll
        for (int kk = 0; kk < kSgmvRanksPerWarp; ++kk)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[kk][r] += af[kk][j] * xf[j];
      }
    }
#pragma unroll
    for (int kk = 0; kk < kSgmvRanksPerWarp; ++kk)
#pragma unroll
      for (int r = 0; r < kLoraTileRows; ++r) {
        if (r >= n) break;  // uniform over the block
#pragma unroll
        for (int o = 16; o > 0; o /= 2) acc[kk][r] += __shfl_xor_sync(0xffffffffu, acc[kk][r], o);
      }
    if (lane == 0) {
#pragma unroll
      for (int kk = 0; kk < kSgmvRanksPerWarp; ++kk)
#pragma unroll
        for (int r = 0; r < kLoraTileRows; ++r)
          if (r < n && k0 + kk < total) out[int64_t(r) * total + k0 + kk] = acc[kk][r];
    }
  }
}

/// Item (tile t, chunk) of the shrink: the tile's rows (shrink_rows).
template <typename T>
__device__ __forceinline__ void shrink_item(const T* x, const int32_t* tiles, const int32_t* perm, int n_rows,
                                            const T* a, int n_in, int total, int chunk_len, float* partial, int t,
                                            int chunk) {
  shrink_rows<T>(x, perm, n_rows, a, n_in, total, chunk_len, partial, tiles[3 * t], tiles[3 * t + 1], tiles[3 * t + 2],
                 chunk);
}

/// After a chunk of the n rows of slot s from perm position p0 (a shrink with xa rows,
/// lora_sgmv_shrink's xa_rows): the last block to finish one of their chunks (the count *done,
/// back to 0 after) sums their chunks in chunk order, times the slot's scale, into xa_rows[row]
/// (the expand's sums in the expand's order: the result does not depend on which block comes last).
__device__ __forceinline__ void shrink_finish_rows(const int32_t* perm, int n_rows, int total, int n_chunks,
                                                   const float* partial, const float* scale, int32_t* done,
                                                   float* xa_rows, int s, int p0, int n) {
  __shared__ int last;
  __threadfence();  // this block's partials before its count
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(done, 1) == n_chunks - 1;
    if (last) *done = 0;  // the next launch (the same step's next layer) counts from 0
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other blocks' partials after their counts
  const float sc = scale[s];
  const float* part = partial + int64_t(p0) * total;
  const int64_t chunk_stride = int64_t(n_rows) * total;
  for (int i = threadIdx.x; i < n * total; i += blockDim.x) {
    float c[kShrinkMaxChunks];  // every chunk's load issued before the first add
#pragma unroll
    for (int j = 0; j < kShrinkMaxChunks; ++j) c[j] = j < n_chunks ? __ldcg(part + j * chunk_stride + i) : 0.0f;
    float v = 0.0f;
#pragma unroll
    for (int j = 0; j < kShrinkMaxChunks; ++j)
      if (j < n_chunks) v += c[j];
    xa_rows[int64_t(perm[p0 + i / total]) * total + i % total] = v * sc;
  }
}

/// shrink_finish_rows for tile t, counted in tile_done[t].
__device__ __forceinline__ void shrink_finish(const int32_t* tiles, const int32_t* perm, int n_rows, int total,
                                              int n_chunks, const float* partial, const float* scale,
                                              int32_t* tile_done, float* xa_rows, int t) {
  shrink_finish_rows(perm, n_rows, total, n_chunks, partial, scale, tile_done + t, xa_rows, tiles[3 * t],
                     tiles[3 * t + 1], tiles[3 * t + 2]);
}

}  // namespace servelab::kernels::lora_detail
