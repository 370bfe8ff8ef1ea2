#pragma once
// The skinny GEMM of kernels/gemv.cu (decode: y[M, N] = x[M, K] · w[N, K]ᵀ, M ≤ 16) as plain C++:
// its work decomposition (row blocks, K steps, K splits) and its tensor-core fragment layout, for
// host and device, so the CPU tests check both without a GPU (tests/kernels/gemv_plan_test.cpp).
//
// Layout: mma.sync.m16n8k16 with the weights as A (16 rows of w) and x as B (its M ≤ 8 rows are
// the n = 8 columns; M 9-16 two such column tiles, each A fragment feeding both). A sum over K may visit K in any order as long as A and B agree, so each lane
// loads whole 16-byte vectors of 8 consecutive K values and the fragments take them as they come:
// lane (g = lane / 4, q = lane % 4) loads, in a K step of 64 values starting at kb, the vectors
// v = 0, 1 at kb + v * 32 + q * 8 of w rows g and g + 8 of a 16-row tile, and of x row g.
// mma (v, h) uses values 4h .. 4h + 3 of vector v (its 32-bit registers 2h and 2h + 1): the PTX
// fragment slots k = 2q, 2q + 1 hold values 4h, 4h + 1 and k = 2q + 8, 2q + 9 hold 4h + 2, 4h + 3,
// in A (rows g, g + 8) and in B (column g) alike. One load instruction (fixed v) has each quad
// read 64 contiguous bytes of a row (two whole 32-byte sectors, so no sector is fetched twice);
// a quad covers 64 consecutive K values (128 bytes of a row) per step; 4 mmas cover the step.
#include <algorithm>
#include <cstdint>

#ifndef SERVELAB_HD  // as in step_input.h
#if defined(__CUDACC__)
#define SERVELAB_HD __host__ __device__ __forceinline__
#else
#define SERVELAB_HD inline
#endif
#endif

namespace servelab::kernels::gemv {

constexpr int kMaxRows = 8;      ///< M bound: the rows of x are the 8 columns of the mma's B operand
constexpr int kMaxM = 2 * kMaxRows;  ///< run_gemv's M bound: one or two column tiles of kMaxRows rows
constexpr int kBlockRows = 32;   ///< outputs (rows of w) per block: two 16-row tiles per warp
constexpr int kWarps = 8;        ///< warps per block; they take the block's K steps in turn
constexpr int kThreads = kWarps * 32;
constexpr int kStepK = 64;       ///< K values per warp step (a quad of lanes reads 128 bytes of a row)
constexpr int kUnroll = 2;       ///< steps loaded before use: 8 x 16 bytes per lane per step
constexpr int kMaxSplits = 32;
constexpr int kPartialFloats = kBlockRows * kMaxRows;  ///< one block's partial sums (one per thread)
static_assert(kThreads == kPartialFloats, "the final reduction gives each thread one (row, m) output");

/// How one product is cut: row_blocks x splits thread blocks; split s of a row block takes the K
/// steps [split_begin(s), split_begin(s + 1)).
struct Plan {
  int row_blocks = 0;
  int k_steps = 0;
  int splits = 1;
  int variant = 0;  ///< the kernel's loop (gemv.cu's kVariant: bit 0 rolling pipeline, bit 1 L2::256B hint)
  SERVELAB_HD int split_begin(int s) const { return int(int64_t(k_steps) * s / splits); }
  int64_t partial_floats() const { return splits > 1 ? int64_t(row_blocks) * splits * kPartialFloats : 0; }
};

/// The decomposition for n outputs and k_steps K steps (of whatever width the kernel steps: 64
/// values here, 128 FP8 or 256 INT4 values in quant_gemv's steps kernel, which shares this plan)
/// on a device with n_sms multiprocessors holding blocks_per_sm blocks each. K is split (each
/// slice's partial sums merged in slice order, so the result is deterministic) only while there
/// are fewer than `waves` waves of resident blocks, each warp keeps at least one unrolled
/// iteration, and the partials fit max_partial_floats with at most max_split_row_blocks row blocks
/// (the counters). Independent of M: a row's result does not depend on how many rows share it.
inline Plan make_plan_steps(int n, int k_steps, int n_sms, int blocks_per_sm, int max_split_row_blocks,
                            int64_t max_partial_floats, int waves = 2) {
  Plan p;
  p.row_blocks = int((int64_t(n) + kBlockRows - 1) / kBlockRows);
  p.k_steps = k_steps;
  const int64_t target = int64_t(std::max(1, waves)) * std::max(1, n_sms) * std::max(1, blocks_per_sm);
  if (p.row_blocks == 0 || p.row_blocks >= target || p.row_blocks > max_split_row_blocks) return p;
  int64_t s = (target + p.row_blocks - 1) / p.row_blocks;
  s = std::min<int64_t>({s, p.k_steps / (kUnroll * kWarps), kMaxSplits});
  while (s > 1 && int64_t(p.row_blocks) * s * kPartialFloats > max_partial_floats) --s;
  p.splits = int(std::max<int64_t>(1, s));
  return p;
}

/// gemv.cu's plan: K steps of kStepK values.
inline Plan make_plan(int n, int k, int n_sms, int blocks_per_sm, int max_split_row_blocks,
                      int64_t max_partial_floats, int waves = 2) {
  return make_plan_steps(n, int((int64_t(k) + kStepK - 1) / kStepK), n_sms, blocks_per_sm, max_split_row_blocks,
                         max_partial_floats, waves);
}

/// The q|k|v product's RoPE and K/V-write epilogue (gemv_rope_kv.cuh): what it needs of
/// QkvArgs (ops.h); head_dim 0: none.
struct RopeKv {
  const int32_t* positions = nullptr;   ///< [m]
  const float* inv_freq = nullptr;      ///< [head_dim / 2]
  const int64_t* slot_mapping = nullptr;  ///< [m]; negative (or null): the row's K/V not written
  void* k_cache = nullptr;              ///< [slots, n_kv_heads, head_dim]
  void* v_cache = nullptr;
  const void* bias = nullptr;           ///< [n] or null
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  SERVELAB_HD int blocks_per_head() const { return head_dim / 32; }
  SERVELAB_HD int rope_blocks() const { return (n_heads + n_kv_heads) * blocks_per_head(); }
};

/// K offset (within a step) of the 8 values of vector v loaded by a lane of quad position q.
SERVELAB_HD constexpr int k_offset(int q, int v) { return v * 32 + q * 8; }

/// 32-bit register i (0..3) of a 16-byte vector (uint4 on the device: x, y, z, w).
template <typename V>
SERVELAB_HD uint32_t reg(const V& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/// A fragment of mma (v, h) from the vectors v of rows g (lo) and g + 8 (hi).
template <typename V>
SERVELAB_HD void frag_a(const V& lo, const V& hi, int h, uint32_t (&a)[4]) {
  a[0] = reg(lo, 2 * h);      // row g,     k 2q, 2q+1
  a[1] = reg(hi, 2 * h);      // row g + 8, k 2q, 2q+1
  a[2] = reg(lo, 2 * h + 1);  // row g,     k 2q+8, 2q+9
  a[3] = reg(hi, 2 * h + 1);  // row g + 8, k 2q+8, 2q+9
}

/// B fragment of mma (v, h) from vector v of x row g.
template <typename V>
SERVELAB_HD void frag_b(const V& xv, int h, uint32_t (&b)[2]) {
  b[0] = reg(xv, 2 * h);      // k 2q, 2q+1,   column g
  b[1] = reg(xv, 2 * h + 1);  // k 2q+8, 2q+9, column g
}

/// Row (0..15, within the tile) and column (= row of x) of accumulator i (0..3) of lane (g, q).
SERVELAB_HD constexpr int acc_row(int g, int i) { return g + 8 * (i / 2); }
SERVELAB_HD constexpr int acc_col(int q, int i) { return 2 * q + (i % 2); }

}  // namespace servelab::kernels::gemv
