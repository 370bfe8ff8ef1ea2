#pragma once
// The end of a gemv-shaped kernel (gemv.cu, quant_gemv_steps.cu): a block of gemv::kWarps warps
// owns gemv::kBlockRows rows of w, each warp two 16-row mma tiles whose fp32 accumulators cover
// a share of the block's K steps. block_row_sums adds the warps' accumulators in warp order, then, with
// K split over blocks, the slices' partial sums in slice order (the block of a row block that
// finishes last does it and resets the row block's counter for the next launch). Every sum has a
// fixed order: the result is deterministic and does not depend on M.
#include <cstdint>

#include "kernels/gemv_plan.h"

namespace servelab::kernels::gemv {

/// Shared memory block_row_sums needs.
struct ReduceSmem {
  float red[kWarps][kPartialFloats];  // [warp][m * kBlockRows + row]
  int last_block;
};

/// Returns false in a block that is not the last of its row block's splits (it has nothing to
/// store); else sum holds output (m = threadIdx.x / kBlockRows, row = threadIdx.x % kBlockRows)
/// of the block's rows. acc[t][i]: lane (g, q)'s accumulator i of tile t; rb: the row block.
__device__ __forceinline__ bool block_row_sums(ReduceSmem& sm, const float (&acc)[2][4], int rb, int splits, int split,
                                          float* partials, int32_t* counters, float& sum) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) sm.red[warp][acc_col(q, i) * kBlockRows + t * 16 + acc_row(g, i)] = acc[t][i];
  __syncthreads();
  sum = 0.0f;
#pragma unroll
  for (int wi = 0; wi < kWarps; ++wi) sum += sm.red[wi][tid];
  if (splits == 1) return true;
  float* part = partials + int64_t(rb) * splits * kPartialFloats;
  part[split * kPartialFloats + tid] = sum;
  __threadfence();  // this block's partials visible device-wide before it is counted
  __syncthreads();
  if (tid == 0) sm.last_block = atomicAdd(&counters[rb], 1) == splits - 1;
  __syncthreads();
  if (!sm.last_block) return false;
  __threadfence();
  sum = 0.0f;
  for (int j = 0; j < splits; ++j) sum += __ldcg(part + j * kPartialFloats + tid);  // slice order
  if (tid == 0) counters[rb] = 0;  // ready for the next launch (stream order)
  return true;
}

/// block_row_sums of column tile ctile of x (its rows 8 ctile .. 8 ctile + 7; gemv.cu and
/// quant_gemv's steps kernel take M 9-16 as two): tile 1 keeps its split-K partial sums and
/// counters after tile 0's (plan.partial_floats() and plan.row_blocks further), so both tiles'
/// sums take one tile's order and a row's bits do not depend on M.
__device__ __forceinline__ bool tile_row_sums(ReduceSmem& sm, const float (&acc)[2][4], const Plan& plan, int rb,
                                              int split, float* partials, int32_t* counters, int ctile, float& sum) {
  const int64_t tile_partials = int64_t(plan.row_blocks) * plan.splits * kPartialFloats;
  return block_row_sums(sm, acc, rb, plan.splits, split, partials ? partials + ctile * tile_partials : nullptr,
                        counters ? counters + ctile * plan.row_blocks : nullptr, sum);
}

}  // namespace servelab::kernels::gemv
