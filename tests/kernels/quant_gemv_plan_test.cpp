// quant_gemv's work split (kernels/quant_gemv_plan.h) without a GPU: the slices cover K exactly
// once, fit the kernel's shared memory when splitting is allowed, stay within kMaxWaves waves, and
// never outgrow the workspace bound a caller allocates.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "kernels/quant_gemv_pipe_plan.h"
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

// The pipe kernel's split (quant_gemv_pipe_plan.h) for blocks of 4 warps on 132 SMs x 4: one
// wave of resident blocks where the row blocks fit it, whole waves where they do not, two steps a
// warp at least, never past the workspace, the slices covering the K steps once.
TEST(QuantGemvPipePlan, SplitsFitTheWavesWithinTheWorkspace) {
  namespace pp = quant_gemv_pipe_plan;
  const int slots = 528, big = 1 << 30;
  // llama2-7b at one row, INT4 steps of 256 K values (16 steps at K 4096) and FP8 of 128 (32):
  EXPECT_EQ(pp::make_plan(384, 16, 4, slots, big, big).splits, 1);   // QKV: 384 blocks, all resident
  EXPECT_EQ(pp::make_plan(128, 16, 4, slots, big, big).splits, 2);   // O: two steps a warp
  EXPECT_EQ(pp::make_plan(688, 16, 4, slots, big, big).splits, 2);   // gate|up: 2.6 waves in 3, not 1.3 in 2
  EXPECT_EQ(pp::make_plan(128, 43, 4, slots, big, big).splits, 4);   // down: 512 blocks, one wave
  EXPECT_EQ(pp::make_plan(1000, 16, 4, slots, big, big).splits, 1);  // LM head: 1.9 waves already
  EXPECT_EQ(pp::make_plan(384, 32, 4, slots, big, big).splits, 1);   // FP8 QKV
  EXPECT_EQ(pp::make_plan(128, 32, 4, slots, big, big).splits, 4);   // FP8 O
  EXPECT_EQ(pp::make_plan(688, 32, 4, slots, big, big).splits, 3);   // FP8 gate|up: 3.9 waves in 4
  EXPECT_EQ(pp::make_plan(1000, 32, 4, slots, big, big).splits, 1);  // FP8 LM head
  // No workspace (or too few counters): never split; a small one caps the split.
  EXPECT_EQ(pp::make_plan(128, 86, 4, slots, 0, 0).splits, 1);
  EXPECT_EQ(pp::make_plan(128, 86, 4, slots, 127, big).splits, 1);
  EXPECT_EQ(pp::make_plan(128, 86, 4, slots, 128, int64_t(2) * 128 * gemv::kPartialFloats).splits, 2);
  int checked = 0;
  for (int warps : {4, 8})
    for (int rb : {1, 3, 17, 128, 129, 384, 688, 1000})
      for (int k_steps : {1, 7, 8, 16, 43, 86, 300})
        for (int64_t cap : {int64_t(0), int64_t(3) * 128 * gemv::kPartialFloats, int64_t(big)}) {
          const gemv::Plan p = pp::make_plan(rb, k_steps, warps, slots * 4 / warps, big, cap);
          SCOPED_TRACE("warps " + std::to_string(warps) + " rb " + std::to_string(rb) + " steps " +
                       std::to_string(k_steps) + " cap " + std::to_string(cap));
          ASSERT_GE(p.splits, 1);
          EXPECT_EQ(p.row_blocks, rb);
          EXPECT_LE(p.partial_floats(), cap);
          if (p.splits > 1) EXPECT_GE(k_steps / p.splits, 2 * warps);  // two steps a warp
          if (p.splits > 1 && rb < slots * 4 / warps) EXPECT_LE(int64_t(rb) * p.splits, slots * 4 / warps);  // one wave
          EXPECT_EQ(p.split_begin(0), 0);
          EXPECT_EQ(p.split_begin(p.splits), k_steps);
          for (int s = 0; s < p.splits; ++s) EXPECT_LT(p.split_begin(s), p.split_begin(s + 1));
          ++checked;
        }
  EXPECT_EQ(checked, 2 * 8 * 7 * 3);
}

}  // namespace quant_gemv_plan_test
}  // namespace servelab::kernels::quant_gemv_plan
