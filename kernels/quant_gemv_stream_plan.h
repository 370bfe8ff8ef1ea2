#pragma once
// How quant_gemv's streaming kernel (quant_gemv_stream.cu) cuts one product, as plain C++ for
// host and tests (tests/kernels/quant_gemv_stream_plan_test.cpp checks it without a GPU).
//
// A block of kWarps warps owns kBlockRows rows of w (each warp two 16-row mma tiles, as in
// quant_gemv_plan.h) and one K slice of whole chunks (chunk_k: 64 FP8 or 128 INT4 values). Blocks
// are small (128 threads) so that several share a multiprocessor: one block's start (x staged in
// shared memory) and end (its partial sums) overlap the others' weight streams. The slice is
// capped by x's staging (kMaxSliceK values a row); products with few row blocks are split further
// until the grid holds kTargetBlocksPerSm blocks a multiprocessor, so that every multiprocessor
// streams. Split slices write fp32 partial sums, added in slice order by the block that finishes
// a row block last (deterministic). The plan depends on N, K and the format, never on M.
#include <algorithm>
#include <cstdint>

#include "kernels/quant_gemv_plan.h"  // SERVELAB_HD, chunk_k

namespace servelab::kernels::quant_gemv_stream_plan {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockRows = kWarps * 32;  ///< two 16-row tiles per warp
constexpr int kMaxRows = 16;
constexpr int kMaxSliceK = 2048;         ///< x slice in shared memory: 16 rows x 2080 x 2 B = 66.5 KB
constexpr int kMaxSplits = 32;
constexpr int kBlocksPerSm = 3;          ///< the kernel's __launch_bounds__ minimum (170 registers)
constexpr int kTargetBlocksPerSm = 2;    ///< splits stop once the grid has this many blocks an SM
constexpr int kMaxTargetBlocksPerSm = 4; ///< the most a caller may ask for (the workspace bound)
constexpr int kMinChunksPerSplit = 2;

using quant_gemv_plan::chunk_k;

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

/// The plan for N = n outputs, depth K = k on n_sms multiprocessors; split only with a workspace
/// (without one, a K longer than kMaxSliceK does not fit: see fits()). target_per_sm: blocks a
/// multiprocessor the splits aim at (1..kMaxTargetBlocksPerSm; 0 the default).
inline Plan make_plan(bool int4, int n, int k, int n_sms, bool may_split, int target_per_sm = 0) {
  Plan p;
  const int ck = chunk_k(int4);
  p.row_blocks = int((int64_t(n) + kBlockRows - 1) / kBlockRows);
  p.chunks = int((int64_t(k) + ck - 1) / ck);
  if (!may_split || p.row_blocks == 0 || p.chunks == 0) return p;
  const int cap_chunks = kMaxSliceK / ck;
  const int s_min = (p.chunks + cap_chunks - 1) / cap_chunks;
  const int s_max = std::max(s_min, std::min(kMaxSplits, std::max(1, p.chunks / kMinChunksPerSplit)));
  const int per_sm = target_per_sm > 0 ? std::min(target_per_sm, kMaxTargetBlocksPerSm) : kTargetBlocksPerSm;
  const int64_t target = int64_t(std::max(1, n_sms)) * per_sm;
  p.splits = s_min;
  while (p.splits < s_max && int64_t(p.row_blocks) * p.splits < target) ++p.splits;
  return p;
}

/// Largest K slice (values) of a plan: what x's staging must hold per row.
inline int max_slice_k(bool int4, const Plan& p) {
  int most = 0;
  for (int s = 0; s < p.splits; ++s) most = std::max(most, p.chunk_begin(s + 1) - p.chunk_begin(s));
  return most * chunk_k(int4);
}
inline bool fits(bool int4, const Plan& p) { return max_slice_k(int4, p) <= kMaxSliceK; }

/// Upper bound of partial_floats() over every product of at most max_n outputs and max_k depth.
/// make_plan stops at the first split count that reaches the target, so row_blocks * splits <
/// target + row_blocks, unless shared memory alone needs more (row_blocks * s_min).
inline int64_t workspace_floats(int max_n, int max_k, int n_sms) {
  const int64_t rb = (int64_t(max_n) + kBlockRows - 1) / kBlockRows;
  const int64_t s_min = std::max<int64_t>(1, (int64_t(max_k) + kMaxSliceK - 1) / kMaxSliceK);
  const int64_t target = int64_t(std::max(1, n_sms)) * kMaxTargetBlocksPerSm;
  return std::max(target + rb, rb * s_min) * kMaxRows * kBlockRows;
}
inline int workspace_counters(int max_n) { return (max_n + kBlockRows - 1) / kBlockRows; }

}  // namespace servelab::kernels::quant_gemv_stream_plan
