#pragma once
// How quant_gemv's tensor-core kernel (quant_gemv_mma.cu) cuts one product, as plain C++ for host
// and tests (tests/kernels/quant_gemv_plan_test.cpp checks it without a GPU).
//
// A block of kWarps warps owns kBlockRows rows of w (each warp two 16-row mma tiles) and one K
// slice; the slice is a run of chunks. A chunk is the K width one 16-byte load per lane covers in
// a quad (4 lanes): 64 values of FP8 (16 a lane) or 128 of INT4 (32 a lane: one 128-group). The
// block stages its slice of x in shared memory once, so the slice is capped (kMaxSliceK) and long
// K is split; products of few row blocks are split too, to fill the multiprocessors in whole
// waves (make_plan). Split slices write fp32 partial sums and the block that finishes a row block
// last adds them in slice order (deterministic). The plan depends on N, K and the format only,
// never on M: a row's result does not depend on how many rows share the product.
#include <algorithm>
#include <cstdint>

#ifndef SERVELAB_HD  // as in step_input.h
#if defined(__CUDACC__)
#define SERVELAB_HD __host__ __device__ __forceinline__
#else
#define SERVELAB_HD inline
#endif
#endif

namespace servelab::kernels::quant_gemv_plan {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockRows = kWarps * 32;  ///< two 16-row tiles per warp
constexpr int kMaxRows = 16;             ///< M: two n = 8 column tiles of the mma
constexpr int kMaxSliceK = 2048;         ///< x slice in shared memory: 16 rows x 2048 x 2 B = 64 KB
constexpr int kMaxSplits = 32;
constexpr int kBlocksPerSm = 1;          ///< the kernel's __launch_bounds__ minimum (its ring fills the rest)
constexpr int kMaxWaves = 4;             ///< splits stop at this many waves of blocks
constexpr int kMinChunksPerSplit = 2;    ///< the kernel keeps two chunks of loads in flight

/// K values per chunk for the format.
SERVELAB_HD constexpr int chunk_k(bool int4) { return int4 ? 128 : 64; }

struct Plan {
  int row_blocks = 0;
  int chunks = 0;  ///< ceil(K / chunk_k)
  int splits = 1;
  /// Split s takes chunks [chunk_begin(s), chunk_begin(s + 1)).
  SERVELAB_HD int chunk_begin(int s) const { return int(int64_t(chunks) * s / splits); }
  /// fp32 partial sums the splits write: [row_blocks, splits, kMaxRows, kBlockRows] (0 unsplit).
  int64_t partial_floats() const {
    return splits > 1 ? int64_t(row_blocks) * splits * kMaxRows * kBlockRows : 0;
  }
};

/// The plan for N = n outputs, depth K = k on n_sms multiprocessors; split only with a workspace.
/// Among the splits that fit shared memory (s_min up) and keep kMinChunksPerSplit chunks a slice,
/// at most kMaxWaves waves of blocks: the fewest whose waves per unit of work, ceil(blocks /
/// slots) / splits, is within 5% of the best (a partly filled last wave idles multiprocessors;
/// more splits cost partial sums).
inline Plan make_plan(bool int4, int n, int k, int n_sms, bool may_split) {
  Plan p;
  const int ck = chunk_k(int4);
  p.row_blocks = int((int64_t(n) + kBlockRows - 1) / kBlockRows);
  p.chunks = int((int64_t(k) + ck - 1) / ck);
  if (!may_split || p.row_blocks == 0 || p.chunks == 0) return p;
  const int cap_chunks = kMaxSliceK / ck;
  const int s_min = (p.chunks + cap_chunks - 1) / cap_chunks;  // the slice must fit shared memory
  const int64_t slots = int64_t(std::max(1, n_sms)) * kBlocksPerSm, rb = p.row_blocks;
  const int64_t max_blocks = std::max(kMaxWaves * slots, rb * s_min);
  const int s_max = int(std::max<int64_t>(
      s_min, std::min<int64_t>({kMaxSplits, std::max(1, p.chunks / kMinChunksPerSplit), max_blocks / rb})));
  auto cost = [&](int s) { return double((rb * s + slots - 1) / slots) / s; };
  double best = cost(s_min);
  for (int s = s_min + 1; s <= s_max; ++s) best = std::min(best, cost(s));
  p.splits = s_min;
  while (p.splits < s_max && cost(p.splits) > 1.05 * best) ++p.splits;
  return p;
}

/// Largest K slice (values) of a plan: what the kernel's shared memory must hold per row of x.
inline int max_slice_k(bool int4, const Plan& p) {
  int most = 0;
  for (int s = 0; s < p.splits; ++s) most = std::max(most, p.chunk_begin(s + 1) - p.chunk_begin(s));
  return most * chunk_k(int4);
}

/// Upper bound of partial_floats() over every product of at most max_n outputs and max_k depth
/// (either format): the workspace a caller allocates once. Counters: row_blocks(max_n) ints.
inline int64_t workspace_floats(int max_n, int max_k, int n_sms) {
  const int64_t rb = (int64_t(max_n) + kBlockRows - 1) / kBlockRows;
  const int64_t s_min = (int64_t(max_k) + kMaxSliceK - 1) / kMaxSliceK;
  const int64_t slots = int64_t(std::max(1, n_sms)) * kBlocksPerSm;
  // make_plan keeps row_blocks * splits <= max(kMaxWaves * slots, row_blocks * s_min).
  return std::max(kMaxWaves * slots, rb * std::max<int64_t>(1, s_min)) * kMaxRows * kBlockRows;
}
inline int workspace_counters(int max_n) { return (max_n + kBlockRows - 1) / kBlockRows; }

}  // namespace servelab::kernels::quant_gemv_plan
