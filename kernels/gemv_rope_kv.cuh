#pragma once
// The q|k|v product's epilogue in gemv (gemv.cu, run_gemv_rope_kv): bias, RoPE on q and k, and
// K/V written to the cache at the step's slot mapping, as rope_kv_write does after the product,
// so one launch a layer fewer. Row blocks are laid out so that RoPE's pairs meet in one block:
// for the first (n_heads + n_kv_heads) · head_dim / 32 blocks (the q and k heads) block b takes
// head b / bph (bph = head_dim / 32 blocks a head) and as its first tile the 16 rows
// 16 (b % bph) .. + 15 of the head's first half, as its second tile the same rows of its second
// half; the blocks after them (the v heads) take 32 consecutive rows, as the plain product does.
// Each value is rounded to the storage type before RoPE, as the stored product would be, and
// rope_rotate (rope_pair.cuh) is rope_kv_write's own expression: the same bits as run_gemv into
// q|k|v followed by rope_kv_write. Only q is written back into y; k and v go to the cache only.
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/gemv_plan.h"
#include "kernels/gemv_reduce.cuh"
#include "kernels/rope_pair.cuh"

namespace servelab::kernels::gemv {

/// The row of w (and column of y) that tile t's row r16 (0..15) of block b computes.
__device__ __forceinline__ int rope_kv_row(const RopeKv& a, int b, int t, int r16) {
  if (b >= a.rope_blocks()) return b * kBlockRows + t * 16 + r16;  // v: as the plain product
  const int bph = a.blocks_per_head();
  return (b / bph) * a.head_dim + t * (a.head_dim / 2) + (b % bph) * 16 + r16;
}

/// Thread (tid / 32 = mm - mm0, r = tid % 32) of the block computing row block b holds `sum`,
/// output (mm, rope_kv_row(b, r / 16, r % 16)); mm0: the first row of x this block's threads
/// cover (8 for quant_gemv's second column tile). Every thread of the block calls it (it may
/// synchronize the block).
template <typename T>
__device__ __forceinline__ void rope_kv_epilogue(const RopeKv& a, ReduceSmem& sm, float sum, T* y, int m, int n, int b,
                                                 int mm0 = 0) {
  const int tid = threadIdx.x, mm = mm0 + tid / kBlockRows, r = tid % kBlockRows;
  const T* bias = static_cast<const T*>(a.bias);
  const int64_t slot = mm < m && a.slot_mapping ? a.slot_mapping[mm] : -1;
  const int hd = a.head_dim, half = hd / 2;
  const int64_t kv_row = int64_t(a.n_kv_heads) * hd;
  if (b >= a.rope_blocks()) {  // a V row: bias, then to the cache
    const int col = b * kBlockRows + r;
    if (mm >= m || col >= n || slot < 0) return;
    float v = to_float<T>(from_float<T>(sum));
    if (bias) v += to_float<T>(bias[col]);
    static_cast<T*>(a.v_cache)[slot * kv_row + (col - a.rope_blocks() * kBlockRows)] = from_float<T>(v);
    return;
  }
  __syncthreads();  // every warp is done reading red
  sm.red[0][tid] = sum;
  __syncthreads();
  if (r >= 16 || mm >= m) return;  // thread r < 16 pairs its first-half row with the second-half one (r + 16)
  const int bph = a.blocks_per_head(), head = b / bph, c = (b % bph) * 16 + r, lo = head * hd + c;
  float x = to_float<T>(from_float<T>(sum)), yv = to_float<T>(from_float<T>(sm.red[0][tid + 16]));
  if (bias) {
    x += to_float<T>(bias[lo]);
    yv += to_float<T>(bias[lo + half]);
  }
  float sn, cs, rx, ry;
  sincosf(static_cast<float>(a.positions[mm]) * a.inv_freq[c], &sn, &cs);  // fp32 angle, as rope_kv_write
  rope_rotate(x, yv, cs, sn, rx, ry);
  T* dst;
  if (head >= a.n_heads) {  // k: to the cache
    if (slot < 0) return;
    dst = static_cast<T*>(a.k_cache) + slot * kv_row + (head - a.n_heads) * hd + c;
  } else {
    dst = y + int64_t(mm) * n + lo;
  }
  dst[0] = from_float<T>(rx);
  dst[half] = from_float<T>(ry);
}

}  // namespace servelab::kernels::gemv
