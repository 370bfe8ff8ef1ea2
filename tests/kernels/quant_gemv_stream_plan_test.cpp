// quant_gemv's streaming-kernel work split (kernels/quant_gemv_stream_plan.h) without a GPU: the
// slices cover K exactly once, fit x's staging when splitting is allowed, fill the target blocks
// a multiprocessor where K allows, and never outgrow the workspace quant_gemv's callers allocate.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "kernels/quant_gemv_plan.h"
#include "kernels/quant_gemv_stream_plan.h"

namespace servelab::kernels::quant_gemv_stream_plan {
namespace quant_gemv_stream_plan_test {

TEST(QuantGemvStreamPlan, SlicesCoverKOnceAndFitTheWorkspace) {
  int checked = 0;
  for (int sms : {1, 78, 132})
    for (bool int4 : {false, true})
      for (int n : {1, 8, 17, 127, 128, 129, 4096, 12288, 22016, 32000})
        for (int k : {16, 48, 128, 640, 1040, 2048, 2064, 4096, 4112, 6016, 11008}) {
          if (int4 && k % 128) continue;
          SCOPED_TRACE((int4 ? "int4 N=" : "fp8 N=") + std::to_string(n) + " K=" + std::to_string(k) +
                       " SMs=" + std::to_string(sms));
          const Plan unsplit = make_plan(int4, n, k, sms, false);
          EXPECT_EQ(unsplit.splits, 1);
          EXPECT_EQ(unsplit.partial_floats(), 0);
          EXPECT_EQ(fits(int4, unsplit), k <= kMaxSliceK);
          const Plan p = make_plan(int4, n, k, sms, true);
          EXPECT_EQ(p.row_blocks, (n + kBlockRows - 1) / kBlockRows);
          EXPECT_GE(int64_t(p.chunks) * chunk_k(int4), k);
          EXPECT_LT(int64_t(p.chunks) * chunk_k(int4) - k, chunk_k(int4));
          EXPECT_EQ(p.chunk_begin(0), 0);
          EXPECT_EQ(p.chunk_begin(p.splits), p.chunks);
          for (int s = 0; s < p.splits; ++s) EXPECT_LT(p.chunk_begin(s), p.chunk_begin(s + 1)) << "empty slice " << s;
          EXPECT_TRUE(fits(int4, p)) << "slice of " << max_slice_k(int4, p);
          // The bound quant_gemv_workspace_floats / _counters take (the max with the mma kernel's).
          EXPECT_LE(p.partial_floats(), workspace_floats(32000, 11008, sms));
          EXPECT_LE(p.row_blocks, workspace_counters(32000));
          EXPECT_LE(p.partial_floats(), workspace_floats(n, k, sms));
          // Enough blocks for every multiprocessor, unless K has too few chunks to split.
          const int64_t blocks = int64_t(p.row_blocks) * p.splits;
          if (p.chunks >= 2 * kMinChunksPerSplit * kTargetBlocksPerSm * sms && n <= 4096) {
            EXPECT_GE(blocks, int64_t(kTargetBlocksPerSm) * sms);
          }
          const int s_min = (p.chunks + kMaxSliceK / chunk_k(int4) - 1) / (kMaxSliceK / chunk_k(int4));
          if (p.splits > s_min) {  // split past what shared memory needs: stopped at the first that reached it
            EXPECT_LT(int64_t(p.row_blocks) * (p.splits - 1), int64_t(kTargetBlocksPerSm) * sms);
          }
          ++checked;
        }
  EXPECT_GT(checked, 500);
}

TEST(QuantGemvStreamPlan, Llama2Shapes) {  // the splits the decode products run with on 132 SMs
  EXPECT_EQ(make_plan(false, 12288, 4096, 132, true).splits, 3);   // qkv: 96 row blocks, 288 blocks
  EXPECT_EQ(make_plan(false, 4096, 4096, 132, true).splits, 9);    // o: 32 row blocks
  EXPECT_EQ(make_plan(false, 22016, 4096, 132, true).splits, 2);   // gate|up: 172 row blocks (slice cap)
  EXPECT_EQ(make_plan(false, 4096, 11008, 132, true).splits, 9);   // down: slices of 1,216-1,280
  EXPECT_EQ(make_plan(true, 4096, 4096, 132, true).splits, 9);     // INT4 o: 32 chunks, 3-4 a slice
  EXPECT_EQ(make_plan(true, 22016, 4096, 132, true).splits, 2);
  EXPECT_EQ(make_plan(true, 32000, 4096, 132, true).splits, 2);    // LM head: slices of 2,048
}

}  // namespace quant_gemv_stream_plan_test
}  // namespace servelab::kernels::quant_gemv_stream_plan
