#pragma once
// Row-count buckets for cuBLASLt's algorithm choice (Gemm, gemm.cu). A prefill or mixed step's row
// count is its token count, which differs from step to step, and asking cuBLASLt's heuristic for
// every new M costs host time inside the measured step (validate-sim on an H100: the first run of a
// process, whose token counts were all new, had a TTFT p50 18% above the sim's). Gemm picks one
// algorithm per bucket instead, checks it accepts the actual M, and warms every bucket up front.
// Plain C++ (tested without a GPU).
#include <vector>

namespace servelab::kernels {

/// The row count whose algorithm serves m rows: m itself up to 64 (decode batches and CUDA-graph
/// buckets keep their exact choice), then m rounded up to a multiple of 32 (up to 512), 128 (up to
/// 4096) or 512.
inline int gemm_rows_bucket(int m) {
  if (m <= 64) return m;
  const int step = m <= 512 ? 32 : m <= 4096 ? 128 : 512;
  return (m + step - 1) / step * step;
}

/// Every bucket from `from` rows to the bucket of `max_m` rows, ascending.
inline std::vector<int> gemm_rows_buckets(int from, int max_m) {
  std::vector<int> out;
  for (int m = from < 1 ? 1 : from; m <= max_m;) {
    const int b = gemm_rows_bucket(m);
    out.push_back(b);
    m = b + 1;
  }
  return out;
}

}  // namespace servelab::kernels
