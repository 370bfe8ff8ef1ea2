// Batched LoRA shrink and expand for a step mixing adapters (kernels/lora.h; reference
// kernels/ref/lora_ref.h). Decode-sized steps are memory-bound on the adapter weights, so both
// kernels read each needed row of A or B once per row of x with 16-byte loads. A block takes one
// row, or a tile of kRowTile consecutive rows in steps of >= kTileFromRows rows (prefill: a
// sequence's rows share an adapter, so the tile's later rows find A and B in L1 instead of
// reading them from L2 again):
// - shrink: a block per (row or tile, group of 8 ranks), a warp per rank: the warp's dot product
//   of x's row with A[slot, k] over n_in, reduced by shuffles; scale applied once.
// - expand: a block per (row or tile, 256 output columns), xa's row staged in shared memory; each thread
//   one column, reading B[slot, c, :] (max_rank contiguous values, 16-byte loads when max_rank is a
//   multiple of 8) and adding into y once. Fused products (q|k|v, gate|up) are segments: A stacks
//   the segments' ranks, so one shrink computes them all; the expand picks each column's segment.
// Rows whose slot is -1 (no adapter, padding) are skipped at once: shrink writes their zeros.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/lora.h"

namespace servelab::kernels {
namespace {

constexpr int kShrinkWarps = 8;
constexpr int kExpandThreads = 256;
constexpr int kRowTile = 16;
constexpr int kTileFromRows = 256;

int rows_per_block(int n_rows) { return n_rows >= kTileFromRows ? kRowTile : 1; }

template <typename T>
__global__ void lora_shrink_kernel(const T* x, const int32_t* row_slot, int n_rows, int tile, const T* a,
                                   const float* scale, int n_in, int max_rank, float* xa) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k = blockIdx.y * kShrinkWarps + warp;
  if (k >= max_rank) return;
  const int r_end = min(n_rows, int(blockIdx.x + 1) * tile);
  for (int r = blockIdx.x * tile; r < r_end; ++r) {
    const int s = row_slot[r];
    if (s < 0) {
      if (lane == 0) xa[int64_t(r) * max_rank + k] = 0.0f;
      continue;
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
}

/// xa's row (all segments) in shared memory; each thread one output column c of segment m, the
/// dot product of xa[r, m · max_rank ...] with B[s, c, :] (16-byte loads when kVec: max_rank % 8 == 0).
template <typename T, bool kVec>
__global__ void lora_expand_kernel(const float* xa, const int32_t* row_slot, int n_rows, int tile, const T* b,
                                   int n_out, int max_rank, int total_rank, int seg_end0, int seg_end1, T* y, int ld_y,
                                   int c0) {
  __shared__ float xs[kLoraMaxSegments * kLoraMaxRank];
  const int c = blockIdx.y * kExpandThreads + threadIdx.x;
  const int m = (c >= seg_end0) + (c >= seg_end1);  // segment of column c (unused ends are n_out)
  const float* xm = xs + m * max_rank;
  const int r_end = min(n_rows, int(blockIdx.x + 1) * tile);
  for (int r = blockIdx.x * tile; r < r_end; ++r) {
    const int s = row_slot[r];  // the same for the whole block: the syncs below are uniform
    if (s < 0) continue;
    __syncthreads();  // the previous row's xs is read
    for (int k = threadIdx.x; k < total_rank; k += blockDim.x) xs[k] = xa[int64_t(r) * total_rank + k];
    __syncthreads();
    if (c >= n_out) continue;
    const T* bc = b + (int64_t(s) * n_out + c) * max_rank;
    float acc = 0.0f;
    if constexpr (kVec) {
      for (int k = 0; k < max_rank; k += 8) {
        float bf[8];
        unpack8<T>(*reinterpret_cast<const Vec8*>(bc + k), bf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc += xm[k + j] * bf[j];
      }
    } else {
      for (int k = 0; k < max_rank; ++k) acc += xm[k] * to_float<T>(bc[k]);
    }
    T* out = y + int64_t(r) * ld_y + c0 + c;
    *out = from_float<T>(to_float<T>(*out) + acc);
  }
}


/// Column where segment m ends (n_out for the last segment and beyond).
int segment_end(const LoraPool& p, int m) { return m + 1 < p.n_seg ? p.seg_end[m] : p.n_out; }

}  // namespace

void check_lora_pool(const LoraPool& p, const char* who) {
  if (p.max_rank < 1 || p.max_rank > kLoraMaxRank)
    throw std::invalid_argument(std::string(who) + ": max_rank " + std::to_string(p.max_rank) + " outside [1, " +
                                std::to_string(kLoraMaxRank) + "]");
  if (p.n_in % 8 != 0) throw std::invalid_argument(std::string(who) + ": n_in must be a multiple of 8");
  if (p.n_seg < 1 || p.n_seg > kLoraMaxSegments)
    throw std::invalid_argument(std::string(who) + ": n_seg " + std::to_string(p.n_seg) + " outside [1, " +
                                std::to_string(kLoraMaxSegments) + "]");
  for (int m = 0; m + 1 < p.n_seg; ++m)
    if (p.seg_end[m] < (m > 0 ? p.seg_end[m - 1] : 0) || p.seg_end[m] > p.n_out)
      throw std::invalid_argument(std::string(who) + ": seg_end[" + std::to_string(m) + "] = " +
                                  std::to_string(p.seg_end[m]) + " is not ascending within n_out " +
                                  std::to_string(p.n_out));
}

void lora_shrink(ScalarType t, const void* x, const int32_t* row_slot, int n_rows, const LoraPool& pool, float* xa,
                 cudaStream_t stream) {
  check_lora_pool(pool, "lora_shrink");
  if (n_rows == 0) return;
  const int total = pool.total_rank();  // segments' ranks stacked in A and xa
  const int tile = rows_per_block(n_rows);
  const dim3 grid((n_rows + tile - 1) / tile, (total + kShrinkWarps - 1) / kShrinkWarps);
  SERVELAB_DISPATCH_16(t,
                       (lora_shrink_kernel<__nv_bfloat16><<<grid, kShrinkWarps * 32, 0, stream>>>(
                           static_cast<const __nv_bfloat16*>(x), row_slot, n_rows, tile, static_cast<const __nv_bfloat16*>(pool.a),
                           pool.scale, pool.n_in, total, xa)),
                       (lora_shrink_kernel<__half><<<grid, kShrinkWarps * 32, 0, stream>>>(
                           static_cast<const __half*>(x), row_slot, n_rows, tile, static_cast<const __half*>(pool.a), pool.scale,
                           pool.n_in, total, xa)));
  CUDA_CHECK_LAUNCH();
}

void lora_expand(ScalarType t, const float* xa, const int32_t* row_slot, int n_rows, const LoraPool& pool, void* y,
                 int ld_y, int c0, cudaStream_t stream) {
  check_lora_pool(pool, "lora_expand");
  if (n_rows == 0 || pool.n_out == 0) return;
  const int tile = rows_per_block(n_rows);
  const dim3 grid((n_rows + tile - 1) / tile, (pool.n_out + kExpandThreads - 1) / kExpandThreads);
  const int e0 = segment_end(pool, 0), e1 = segment_end(pool, 1);
  auto launch = [&](auto tag, auto vec) {
    using T = decltype(tag);
    lora_expand_kernel<T, decltype(vec)::value><<<grid, kExpandThreads, 0, stream>>>(
        xa, row_slot, n_rows, tile, static_cast<const T*>(pool.b), pool.n_out, pool.max_rank, pool.total_rank(), e0, e1,
        static_cast<T*>(y), ld_y, c0);
  };
  const bool vec = pool.max_rank % 8 == 0;
  SERVELAB_DISPATCH_16(t,
                       (vec ? launch(__nv_bfloat16{}, std::true_type{}) : launch(__nv_bfloat16{}, std::false_type{})),
                       (vec ? launch(__half{}, std::true_type{}) : launch(__half{}, std::false_type{})));
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
