#pragma once
// How quant_gemv's pipe kernel (quant_gemv_pipe.cu) cuts a product, as plain C++ for host and
// tests (tests/kernels/quant_gemv_plan_test.cpp): gemv_plan.h's decomposition (blocks of 32 rows
// of w whose warps take K steps in turn, K split into slices whose partial sums are added in slice
// order), with blocks of `warps` warps and the split chosen for the waves of resident blocks
// (`slots`: SMs x blocks an SM). Every split leaves each warp at least two steps (its two register
// buffers). Fewer row blocks than slots: the largest split that still fits one wave (all blocks
// resident at once). More: the split with the fewest waves per unit of work, ceil(blocks / slots)
// / splits (the fewest splits within 5% of the best): blocks of one product are alike and run in
// waves, and a partial last wave idles SMs (llama2-7b's gate|up, 688 row blocks on 528 slots:
// one split takes 2 waves for 1.3 waves of work, two take 3 for 2.6). Independent of M.
#include <algorithm>
#include <cstdint>

#include "kernels/gemv_plan.h"

namespace servelab::kernels::quant_gemv_pipe_plan {

/// row_blocks x k_steps of work for blocks of `warps` warps on `slots` resident blocks; split
/// only with a workspace that holds the partial sums (max_split_row_blocks counters,
/// max_partial_floats floats: gemv::kPartialFloats a block).
inline gemv::Plan make_plan(int row_blocks, int k_steps, int warps, int slots, int max_split_row_blocks,
                            int64_t max_partial_floats) {
  gemv::Plan p;
  p.row_blocks = row_blocks;
  p.k_steps = k_steps;
  if (row_blocks <= 0 || k_steps <= 0 || row_blocks > max_split_row_blocks) return p;
  const int64_t rb = row_blocks, sl = std::max(1, slots);
  int s_max = std::min(gemv::kMaxSplits, std::max(1, k_steps / (2 * std::max(1, warps))));
  while (s_max > 1 && rb * s_max * gemv::kPartialFloats > max_partial_floats) --s_max;
  if (rb < sl) {
    p.splits = int(std::max<int64_t>(1, std::min<int64_t>(s_max, sl / rb)));
    return p;
  }
  auto cost = [&](int s) { return double((rb * s + sl - 1) / sl) / s; };
  double best = cost(1);
  for (int s = 2; s <= s_max; ++s) best = std::min(best, cost(s));
  while (p.splits < s_max && cost(p.splits) > 1.05 * best) ++p.splits;
  return p;
}

}  // namespace servelab::kernels::quant_gemv_pipe_plan
