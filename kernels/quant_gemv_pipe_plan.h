#pragma once
// How quant_gemv's pipe kernel (quant_gemv_steps.cu) cuts a product, as plain C++ for host and
// tests (tests/kernels/quant_gemv_plan_test.cpp): gemv_plan.h's decomposition (blocks of 32 rows
// of w, 8 warps taking K steps in turn, K split into slices whose partial sums are added in slice
// order), with the split chosen to fill whole waves of resident blocks. Blocks of one product are
// alike, so they run in waves: llama2-7b's QKV (384 row blocks) on 132 SMs x 2 blocks takes two
// waves, the second 45% full (73% of the time used), gate|up (688) 87%. Among the splits that
// leave each warp at least one step, the fewest whose waves per unit of work, ceil(blocks /
// slots) / splits, is within 5% of the best. Independent of M.
#include <algorithm>
#include <cstdint>

#include "kernels/gemv_plan.h"

namespace servelab::kernels::quant_gemv_pipe_plan {

/// row_blocks x k_steps of work on `slots` resident blocks (SMs x blocks an SM); split only with
/// a workspace that holds the partial sums (max_split_row_blocks counters, max_partial_floats).
inline gemv::Plan make_plan(int row_blocks, int k_steps, int slots, int max_split_row_blocks,
                            int64_t max_partial_floats) {
  gemv::Plan p;
  p.row_blocks = row_blocks;
  p.k_steps = k_steps;
  if (row_blocks <= 0 || k_steps <= 0 || row_blocks > max_split_row_blocks) return p;
  const int64_t rb = row_blocks, sl = std::max(1, slots);
  int s_max = std::min(gemv::kMaxSplits, std::max(1, k_steps / gemv::kWarps));
  while (s_max > 1 && rb * s_max * gemv::kPartialFloats > max_partial_floats) --s_max;
  auto cost = [&](int s) { return double((rb * s + sl - 1) / sl) / s; };
  double best = cost(1);
  for (int s = 2; s <= s_max; ++s) best = std::min(best, cost(s));
  while (p.splits < s_max && cost(p.splits) > 1.05 * best) ++p.splits;
  return p;
}

}  // namespace servelab::kernels::quant_gemv_pipe_plan
