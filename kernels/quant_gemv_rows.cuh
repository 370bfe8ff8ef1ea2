#pragma once
// The epilogue quant_gemv's steps and packed kernels share (quant_gemv_steps.cu,
// quant_gemv_packed.cu; both cut the product as gemv_plan.h's steps): a block owns 32 rows of w,
// two 16-row tiles whose per-warp fp32 sums gemv::block_row_sums adds in a fixed order; FP8's
// scale on the row's total; the store, or with QuantGemvArgs::silu_ffn, silu(gate) · up of the
// block's 16 gate rows (tile 0) and their 16 up rows (tile 1), or with QuantGemvArgs::rope RoPE
// and the K/V write (gemv_rope_kv.cuh).
#include <cuda_bf16.h>

#include "kernels/gemv_plan.h"
#include "kernels/gemv_reduce.cuh"
#include "kernels/gemv_rope_kv.cuh"
#include "kernels/quant_gemv.h"
#include "kernels/quant_gemv_frag.cuh"
#include "kernels/silu.cuh"

namespace servelab::kernels::quant_gemv_rows {

/// Row of w behind tile t, tile row r (0..15) of row block rb: with silu_ffn, tile 0 is gate
/// rows 16 rb .., tile 1 the up rows silu_ffn + 16 rb ..; else rows 32 rb + 16 t + r. Unclamped.
/// With rope (q|k|v), the pairs' layout of gemv_rope_kv.cuh.
__device__ __forceinline__ int tile_row(const QuantGemvArgs& a, int rb, int t, int r) {
  if (a.rope.head_dim > 0) return gemv::rope_kv_row(a.rope, rb, t, r);
  return a.silu_ffn > 0 ? t * a.silu_ffn + rb * 16 + r : rb * gemv::kBlockRows + 16 * t + r;
}

/// The row of w behind block-local row r (0..31) of row block rb.
__device__ __forceinline__ int block_row(const QuantGemvArgs& a, int rb, int r) { return tile_row(a, rb, r / 16, r % 16); }

/// Sums the block's accumulators (acc[tile][i], lane (g, q)'s mma C fragment) for column tile ctile
/// (rows of x 8 ctile .. 8 ctile + 7) and stores the outputs: the row total (times FP8's scale), or
/// silu(gate) · up. Column tile 1 (M 9-16, the steps kernel) keeps its split-K partial sums and
/// counters after tile 0's (plan.partial_floats() and plan.row_blocks further), so the two tiles'
/// sums take the same order as one tile's: a row's bits do not depend on M.
template <bool kInt4, typename OutT>
__device__ __forceinline__ void finish(gemv::ReduceSmem& sm, const float (&acc)[2][4], const QuantGemvArgs& a,
                                       const gemv::Plan& plan, int rb, int split, int ctile = 0) {
  float sum;
  if (!gemv::tile_row_sums(sm, acc, plan, rb, split, a.partials, a.counters, ctile, sum)) return;
  const int tid = threadIdx.x, mm = tid / gemv::kBlockRows + 8 * ctile, r = tid % gemv::kBlockRows;
  const int nn = block_row(a, rb, r);
  if constexpr (!kInt4) sum *= __ldg(a.scales + (a.n_scales == 1 ? 0 : min(nn, a.n - 1)));
  if constexpr (!std::is_same_v<OutT, float>) {
    if (a.rope.head_dim > 0) {  // q|k|v: RoPE and the K/V write (the rows are the pairs' layout)
      gemv::rope_kv_epilogue<__nv_bfloat16>(a.rope, sm, sum, static_cast<__nv_bfloat16*>(a.y), a.m, a.n, rb, 8 * ctile);
      return;
    }
  }
  if (a.silu_ffn > 0) {  // thread (mm, r < 16) pairs gate row 16 rb + r with its up row (thread + 16)
    __syncthreads();     // every warp is done reading sm.red
    sm.red[0][tid] = sum;
    __syncthreads();
    const int col = rb * 16 + r;
    if (r < 16 && mm < a.m && col < a.silu_ffn) {  // each half rounded as the stored gate_up would be
      const float gate = __bfloat162float(__float2bfloat16_rn(sum));
      const float up = __bfloat162float(__float2bfloat16_rn(sm.red[0][tid + 16]));
      quant_gemv_frag::store_out<OutT>(a.y, int64_t(mm) * a.silu_ffn + col, silu_mul_f(gate, up), false);
    }
    return;
  }
  if (mm < a.m && nn < a.n) quant_gemv_frag::store_out<OutT>(a.y, int64_t(mm) * a.n + nn, sum, a.accumulate);
}

}  // namespace servelab::kernels::quant_gemv_rows
