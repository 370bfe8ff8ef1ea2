// A product's grouped shrink and expand as one launch beside the product (LoraSgmvConfig::
// side_fused; kernels/lora_sgmv.h lora_sgmv_fused). Why: from 16 decode rows the products are
// cuBLASLt's, so the LoRA work runs on the side stream, two launches a product (shrink, then the
// expand with PDL) on a branch the next kernel joins; the launches and the hand-off between them
// are a fixed cost per branch. Here the grid's first `shrink.blocks` blocks run the shrink as
// the decode gemv runs it in its own first blocks (kernels/gemv_lora.cuh lora_shrink_block:
// (row or tile, chunk) items, each row's xa finished by its last chunk, then a count), and the
// other blocks are the by-rows expand (8 consecutive rows of the plan's order × 256 columns):
// each loads its rows, their slots, y and B's first 16 ranks, waits for the shrink blocks' count,
// stages the rows' xa in shared memory and adds the delta (or writes it alone). No deadlock: the
// shrink blocks have the lowest indices (dispatched first, as the gemv's), never wait, and the
// count is zeroed by the step's lora_plan (one count per such launch of a step).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/gemv_lora.cuh"
#include "kernels/lora_sgmv.h"

namespace servelab::kernels {
namespace {

constexpr int kFusedThreads = 256;  // the shrink's 8 warps; the expand's 256 columns a block

template <typename T>
struct FusedExpand {
  const T* b;
  int n_out, max_rank, total, seg_end0, seg_end1;
  T* y;
  int ld_y, c0;
  bool accumulate;  ///< false: y = the delta alone
  int row_blocks;   ///< blocks of kLoraTileRows rows the launch's row count makes
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(kFusedThreads)
    lora_sgmv_fused_kernel(const T* x, LoraGemvShrink s, FusedExpand<T> e) {
  __shared__ __align__(16) float xs[kLoraTileRows * kLoraMaxSegments * kLoraMaxRank];
  if (int(blockIdx.x) < s.blocks) {
    gemv::lora_shrink_block<T>(s, e.total, x, blockIdx.x);
    return;
  }
  const int item = int(blockIdx.x) - s.blocks;
  const int p0 = (item % e.row_blocks) * kLoraTileRows, c = (item / e.row_blocks) * kFusedThreads + threadIdx.x;
  const int n_with = s.n_tiles[1];
  if (p0 >= n_with) return;
  const int n = min(kLoraTileRows, n_with - p0);
  const bool live = c < e.n_out;
  const int cc = live ? c : e.n_out - 1;
  const int m = (cc >= e.seg_end0) + (cc >= e.seg_end1);
  int row[kLoraTileRows];
  const T* bc[kLoraTileRows];
  Vec8 b0[kLoraTileRows], b1[kLoraTileRows];  // B's first 16 ranks, loaded before the wait
  float y_old[kLoraTileRows];
#pragma unroll
  for (int r = 0; r < kLoraTileRows; ++r) {
    const int pr = p0 + min(r, n - 1);
    row[r] = s.perm[pr];
    bc[r] = e.b + (int64_t(s.perm_slot[pr]) * e.n_out + cc) * e.max_rank;
  }
#pragma unroll
  for (int r = 0; r < kLoraTileRows; ++r) {
    y_old[r] = r < n && e.accumulate ? to_float<T>(e.y[int64_t(row[r]) * e.ld_y + e.c0 + cc]) : 0.0f;
    if constexpr (kVec) {
      if (r < n) b0[r] = __ldg(reinterpret_cast<const Vec8*>(bc[r]));
      if (r < n && e.max_rank > 8) b1[r] = __ldg(reinterpret_cast<const Vec8*>(bc[r] + 8));
    }
  }
  gemv::lora_wait_shrink(s);
  for (int i = threadIdx.x; i < n * e.total; i += blockDim.x)
    xs[i] = __ldcg(s.xa_rows + int64_t(s.perm[p0 + i / e.total]) * e.total + i % e.total);
  __syncthreads();
  if (!live) return;
  const float* xm = xs + m * e.max_rank;
  float acc[kLoraTileRows] = {};
  if constexpr (kVec) {
    for (int k = 0; k < e.max_rank; k += 8) {
#pragma unroll
      for (int r = 0; r < kLoraTileRows; ++r) {
        if (r >= n) break;
        float bf[8];
        unpack8<T>(k == 0 ? b0[r] : k == 8 ? b1[r] : __ldg(reinterpret_cast<const Vec8*>(bc[r] + k)), bf);
        const float4 x0 = *reinterpret_cast<const float4*>(xm + r * e.total + k);
        const float4 x1 = *reinterpret_cast<const float4*>(xm + r * e.total + k + 4);
        acc[r] += x0.x * bf[0] + x0.y * bf[1] + x0.z * bf[2] + x0.w * bf[3] + x1.x * bf[4] + x1.y * bf[5] +
                  x1.z * bf[6] + x1.w * bf[7];
      }
    }
  } else {
    for (int k = 0; k < e.max_rank; ++k) {
#pragma unroll
      for (int r = 0; r < kLoraTileRows; ++r) {
        if (r >= n) break;
        acc[r] += xm[r * e.total + k] * to_float<T>(bc[r][k]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kLoraTileRows; ++r) {
    if (r >= n) break;
    e.y[int64_t(row[r]) * e.ld_y + e.c0 + c] = from_float<T>(y_old[r] + acc[r]);
  }
}

}  // namespace

void lora_sgmv_fused(ScalarType t, const void* x, const LoraPlan& plan, int n_rows, const LoraPool& pool,
                     float* partial, float* xa_rows, int launch, void* y, int ld_y, int c0, bool accumulate,
                     cudaStream_t stream) {
  if (n_rows == 0 || pool.n_out == 0) return;
  const LoraSgmvConfig& cf = plan.config;
  if (cf.fused_shrink_blocks < 1)
    throw std::invalid_argument("lora_sgmv_fused: fused_shrink_blocks " + std::to_string(cf.fused_shrink_blocks) +
                                " must be >= 1");
  LoraGemvShrink s = lora_gemv_shrink(plan, n_rows, pool, partial, xa_rows, launch);  // checks the pool and counts
  s.blocks = cf.fused_shrink_blocks;
  s.row_items = cf.fused_row_items;
  // Chunks so that the items about fill the shrink blocks: items of a row count each row as a
  // tile would count 8 of them (lora_chunk_len's unit).
  s.chunk_len = lora_chunk_len(pool.n_in, s.row_items ? n_rows * kLoraTileRows : n_rows, s.blocks);
  s.n_chunks = (pool.n_in + s.chunk_len - 1) / s.chunk_len;
  const int row_blocks = (n_rows + kLoraTileRows - 1) / kLoraTileRows;
  const int col_blocks = (pool.n_out + kFusedThreads - 1) / kFusedThreads;
  const int grid = s.blocks + row_blocks * col_blocks;
  auto end = [&](int m) { return m + 1 < pool.n_seg ? pool.seg_end[m] : pool.n_out; };
  auto run = [&](auto tag, auto vec) {
    using T = decltype(tag);
    const FusedExpand<T> e{static_cast<const T*>(pool.b), pool.n_out, pool.max_rank, pool.total_rank(), end(0), end(1),
                           static_cast<T*>(y),        ld_y,       c0,            accumulate,        row_blocks};
    lora_sgmv_fused_kernel<T, decltype(vec)::value><<<grid, kFusedThreads, 0, stream>>>(static_cast<const T*>(x), s, e);
  };
  const bool vec = pool.max_rank % 8 == 0;
  SERVELAB_DISPATCH_16(t, (vec ? run(__nv_bfloat16{}, std::true_type{}) : run(__nv_bfloat16{}, std::false_type{})),
                       (vec ? run(__half{}, std::true_type{}) : run(__half{}, std::false_type{})));
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
