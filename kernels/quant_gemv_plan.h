#pragma once
// How quant_gemv's tensor-core kernel (quant_gemv_mma.cu) cuts one product, as plain C++ for host
// and tests (tests/kernels/quant_gemv_plan_test.cpp checks it without a GPU).
//
// A block of kWarps warps owns kBlockRows rows of w (each warp two 16-row mma tiles) and one K
// slice; the slice is a run of chunks. A chunk is the K width one 16-byte load per lane covers in
// a quad (4 lanes): 64 values of FP8 (16 a lane) or 128 of INT4 (32 a lane: one 128-group). The
// block stages its slice of x in shared memory once, so the slice is capped (kMaxSliceK) and long
// K is split; short products are split too until the grid has about kBlocksPerSm blocks per
// multiprocessor. Split slices write fp32 partial sums and the block that finishes a row block
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
constexpr int kBlocksPerSm = 2;          ///< the kernel's __launch_bounds__ minimum
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
inline Plan make_plan(bool int4, int n, int k, int n_sms, bool may_split) {
  Plan p;
  const int ck = chunk_k(int4);
  p.row_blocks = int((int64_t(n) + kBlockRows - 1) / kBlockRows);
  p.chunks = int((int64_t(k) + ck - 1) / ck);
  if (!may_split || p.row_blocks == 0 || p.chunks == 0) return p;
  const int cap_chunks = kMaxSliceK / ck;
  const int s_min = (p.chunks + cap_chunks - 1) / cap_chunks;  // the slice must fit shared memory
  const int64_t target = int64_t(std::max(1, n_sms)) * kBlocksPerSm;
  int64_t s = (target + p.row_blocks - 1) / p.row_blocks;     // fill the multiprocessors
  s = std::min<int64_t>({s, std::max(1, p.chunks / kMinChunksPerSplit), kMaxSplits});
  p.splits = int(std::max<int64_t>(s, s_min));
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
  const int64_t target = int64_t(std::max(1, n_sms)) * kBlocksPerSm;
  // rb' * s <= max(target + rb', rb' * s_min) for every rb' <= rb (s = ceil(target / rb') or s_min).
  return std::max(target + rb, rb * std::max<int64_t>(1, s_min)) * kMaxRows * kBlockRows;
}
inline int workspace_counters(int max_n) { return (max_n + kBlockRows - 1) / kBlockRows; }

}  // namespace servelab::kernels::quant_gemv_plan
