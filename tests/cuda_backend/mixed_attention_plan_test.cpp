// Where a mixed step's decodes take their attention (engine/backend/cuda/mixed_attention_plan.h).
#include "engine/backend/cuda/mixed_attention_plan.h"

#include <vector>

#include <gtest/gtest.h>

namespace servelab::cuda {
namespace mixed_attention_plan_test {  // named: a unity batch shares one translation unit

struct MixedStep {
  std::vector<int32_t> q, ctx;
  MixedStep& decodes(int n, int context) {
    for (int i = 0; i < n; ++i) q.push_back(1), ctx.push_back(context);
    return *this;
  }
  MixedStep& chunk(int rows, int context_before) {
    q.push_back(rows);
    ctx.push_back(context_before + rows);
    return *this;
  }
};

TEST(MixedAttentionPlan, OneWaveCostsItsLongestTile) {
  const MixedAttentionCosts c;  // llama3-8b on an H200: 8 KV heads, GQA 4, 132 SMs
  const MixedStep s = MixedStep{}.chunk(501, 3773);  // 16 tiles a head: 128 blocks, one wave
  EXPECT_DOUBLE_EQ(prefill_attention_ns(c, s.q, s.ctx), c.tile_ns_fixed + c.tile_ns_per_key * 4274);
}

TEST(MixedAttentionPlan, ADecodePastTheWaveStartsASecondOne) {
  const MixedAttentionCosts c;
  const MixedStep alone = MixedStep{}.chunk(501, 3773), with = MixedStep{}.decodes(2, 3774).chunk(501, 3773);
  const double one = prefill_attention_ns(c, alone.q, alone.ctx), two = prefill_attention_ns(c, with.q, with.ctx);
  EXPECT_GT(two, 1.7 * one);  // measured 112 against 60 µs a layer (call 6)
  EXPECT_EQ(mixed_decode_prefix(c, with.q, with.ctx), 2);
}

TEST(MixedAttentionPlan, DecodesThatFitTheWaveStayInThePrefillKernel) {
  const MixedAttentionCosts c;
  const MixedStep s = MixedStep{}.decodes(11, 3774).chunk(125, 3773);  // 4 + 11 tiles a head: 120 blocks
  EXPECT_EQ(mixed_decode_prefix(c, s.q, s.ctx), 0);
}

TEST(MixedAttentionPlan, ManyLongDecodesCostTheDecodeKernelMoreThanASecondWave) {
  MixedAttentionCosts c;
  const MixedStep s = MixedStep{}.decodes(16, 3774).chunk(496, 3773);  // 8 x 16 decode tiles fill the second wave
  EXPECT_EQ(mixed_decode_prefix(c, s.q, s.ctx), 0);
  c.decode_bytes_per_ns *= 4;  // a memory four times faster: the decode kernel again
  EXPECT_EQ(mixed_decode_prefix(c, s.q, s.ctx), 16);
}

TEST(MixedAttentionPlan, OnlyLeadingOneRowSequencesBesideAChunk) {
  const MixedAttentionCosts c;
  const MixedStep decode_only = MixedStep{}.decodes(4, 3000);
  EXPECT_EQ(mixed_decode_prefix(c, decode_only.q, decode_only.ctx), 0);
  const MixedStep chunk_first = MixedStep{}.chunk(501, 3773).decodes(2, 3774);  // not the scheduler's order
  EXPECT_EQ(mixed_decode_prefix(c, chunk_first.q, chunk_first.ctx), 0);
  const MixedStep none;
  EXPECT_EQ(mixed_decode_prefix(c, none.q, none.ctx), 0);
}

TEST(MixedAttentionPlan, MhaDecodesTakeAWaveOfTheirOwnSooner) {
  MixedAttentionCosts c;
  c.n_kv_heads = 32, c.group = 1;  // llama2-7b: a decode adds 32 blocks, a chunk of 512 rows 128
  const MixedStep s = MixedStep{}.decodes(2, 2049).chunk(510, 2048);
  EXPECT_EQ(mixed_decode_prefix(c, s.q, s.ctx), 2);
}

TEST(MixedAttentionPlan, RefusesMismatchedSpans) {
  const MixedAttentionCosts c;
  const std::vector<int32_t> q = {1, 2}, ctx = {3};
  EXPECT_THROW(prefill_attention_ns(c, q, ctx), std::invalid_argument);
}

}  // namespace mixed_attention_plan_test
}  // namespace servelab::cuda
