// quant_gemv's work split (kernels/quant_gemv_plan.h) without a GPU: the slices cover K exactly
// once, fit the kernel's shared memory when splitting is allowed, stay within kMaxWaves waves, and
// never outgrow the workspace bound a caller allocates.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "kernels/quant_gemv_plan.h"

namespace servelab::kernels::quant_gemv_plan {
namespace quant_gemv_plan_test {

TEST(QuantGemvPlan, SlicesCoverKOnceAndFitTheWorkspace) {
  const int sms = 132, max_n = 22016, max_k = 11008;
  const int64_t bound = workspace_floats(max_n, max_k, sms);
  int checked = 0;
  for (bool int4 : {false, true})
    for (int n : {1, 8, 17, 255, 256, 257, 4096, 12288, 22016})
      for (int k : {16, 48, 128, 640, 2048, 2176, 4096, 6016, 11008}) {
        if (int4 && k % 128) continue;
        SCOPED_TRACE((int4 ? "int4 N=" : "fp8 N=") + std::to_string(n) + " K=" + std::to_string(k));
        const Plan unsplit = make_plan(int4, n, k, sms, false);
        EXPECT_EQ(unsplit.splits, 1);
        EXPECT_EQ(unsplit.partial_floats(), 0);
        const Plan p = make_plan(int4, n, k, sms, true);
        EXPECT_EQ(p.row_blocks, (n + kBlockRows - 1) / kBlockRows);
        EXPECT_LT(int64_t(p.chunks) * chunk_k(int4) - k, chunk_k(int4));
        EXPECT_GE(int64_t(p.chunks) * chunk_k(int4), k);
        EXPECT_EQ(p.chunk_begin(0), 0);
        EXPECT_EQ(p.chunk_begin(p.splits), p.chunks);
        for (int s = 0; s < p.splits; ++s) EXPECT_LT(p.chunk_begin(s), p.chunk_begin(s + 1)) << "empty slice " << s;
        EXPECT_LE(max_slice_k(int4, p), kMaxSliceK);
        EXPECT_LE(p.partial_floats(), bound);
        EXPECT_LE(p.row_blocks, workspace_counters(max_n));
        const int64_t rb = p.row_blocks, s_min = (p.chunks + kMaxSliceK / chunk_k(int4) - 1) / (kMaxSliceK / chunk_k(int4));
        EXPECT_GE(p.splits, s_min);  // at most kMaxWaves waves, unless shared memory needs more slices
        EXPECT_LE(rb * p.splits, std::max<int64_t>(kMaxWaves * sms, rb * s_min));
        if (rb == 16 && p.chunks >= 32) { EXPECT_EQ(rb * p.splits % sms, rb * p.splits) << "one whole wave"; }
        ++checked;
      }
  EXPECT_GT(checked, 100);
}

TEST(QuantGemvPlan, Llama2Shapes) {  // the splits the decode products run with on 132 SMs
  EXPECT_EQ(make_plan(true, 4096, 4096, 132, true).splits, 8);    // O: 16 row blocks, one wave
  EXPECT_EQ(make_plan(false, 4096, 4096, 132, true).splits, 8);
  EXPECT_EQ(make_plan(true, 22016, 4096, 132, true).splits, 3);   // gate|up: 258 blocks, two waves
  EXPECT_EQ(make_plan(true, 4096, 11008, 132, true).splits, 8);   // down: slices of 1,408
  EXPECT_EQ(make_plan(false, 32000, 4096, 132, true).splits, 2);  // LM head: slices of 2,048
}

}  // namespace quant_gemv_plan_test
}  // namespace servelab::kernels::quant_gemv_plan
