// Where a mixed step's decodes take their attention (engine/backend/cuda/mixed_attention_plan.h).
#include "engine/backend/cuda/mixed_attention_plan.h"

#include <cmath>
#include <span>
#include <string>
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

TEST(MixedAttentionPlan, ManyDecodesBesideAShortChunkStayInThePrefillKernel) {
  MixedAttentionCosts c;
  const MixedStep s = MixedStep{}.decodes(16, 3774).chunk(256, 3773);  // 64 + 128 blocks: two waves
  EXPECT_EQ(mixed_decode_prefix(c, s.q, s.ctx), 0);
  c.decode_bytes_per_ns *= 4;  // a memory four times faster: the decode kernel
  EXPECT_EQ(mixed_decode_prefix(c, s.q, s.ctx), 16);
}

// Call 7 on an H200 (step_probe, results/sim-validation/mixed-2026-11-30/: the same step on a
// backend with mixed_decodes prefill and one with decode, 11 rounds, medians): what the decode
// kernel saved a step (ms, 32 layers). The model comes within 0.65 ms a step (20 µs a layer) of
// each, and picks the faster wherever they differed by more than that.
TEST(MixedAttentionPlan, PricesWhatAnH200Measured) {
  struct Case {
    int chunk, decodes, context;
    double saved_ms;  // prefill-kernel step minus decode-kernel step
  };
  const Case gqa[] = {{501, 1, 3773, 1.857},  {501, 2, 3773, 1.447},   {501, 4, 3773, 1.023},  {501, 8, 3773, 0.589},
                      {501, 11, 3773, -0.178}, {496, 16, 3773, -0.434}, {480, 32, 3773, 0.416}, {125, 2, 3773, -0.409},
                      {125, 11, 3773, -1.619}, {256, 4, 3773, -0.877},  {256, 16, 3773, -0.312}, {501, 2, 1024, 0.019},
                      {496, 16, 1024, 0.011},  {480, 32, 1024, 0.519},  {256, 8, 1024, -0.653}};
  const Case mha[] = {{510, 2, 2048, 0.298}, {504, 8, 2048, 0.499}, {496, 16, 2048, 0.368}, {256, 4, 2048, 0.221},
                      {128, 16, 2048, 0.669}};
  auto check = [](const MixedAttentionCosts& c, const Case& k) {
    const MixedStep s = MixedStep{}.decodes(k.decodes, k.context + 1).chunk(k.chunk, k.context);
    const std::span<const int32_t> q(s.q), ctx(s.ctx);
    const double saved_ns = prefill_attention_ns(c, q, ctx) - prefill_attention_ns(c, q.last(1), ctx.last(1)) -
                            decode_attention_ns(c, ctx.first(size_t(k.decodes)));
    const double saved_ms = saved_ns * 32 / 1e6;
    SCOPED_TRACE(std::to_string(k.chunk) + " rows beside " + std::to_string(k.decodes) + " decodes at " +
                 std::to_string(k.context));
    EXPECT_NEAR(saved_ms, k.saved_ms, 0.65);
    if (std::abs(k.saved_ms) > 0.65) EXPECT_EQ(mixed_decode_prefix(c, q, ctx) > 0, k.saved_ms > 0);
  };
  const MixedAttentionCosts llama3_8b;
  for (const Case& k : gqa) check(llama3_8b, k);
  MixedAttentionCosts llama2_7b;
  llama2_7b.n_kv_heads = 32, llama2_7b.group = 1;
  for (const Case& k : mha) check(llama2_7b, k);
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

TEST(MixedAttentionPlan, RefusesMismatchedSpans) {
  const MixedAttentionCosts c;
  const std::vector<int32_t> q = {1, 2}, ctx = {3};
  EXPECT_THROW(prefill_attention_ns(c, q, ctx), std::invalid_argument);
}

}  // namespace mixed_attention_plan_test
}  // namespace servelab::cuda

namespace servelab::cuda {
namespace mixed_attention_plan_test {

// The backend's planner: decode_kernel moves every leading decode beside a chunk, prefill_kernel
// none, auto what mixed_decode_prefix picks, and nothing where the backend may not move them or
// (auto) where the modelled prefill kernel does not run.
TEST(MixedDecodePlanner, EachModeAndWhereItMayNotMove) {
  const MixedAttentionCosts c;
  const std::vector<int32_t> starts = {0, 1, 2, 503}, ctx = {3774, 3774, 4274};  // 2 decodes, 501 rows
  const std::vector<int32_t> short_starts = {0, 1, 2, 127};                     // beside 125 rows
  EXPECT_EQ(MixedDecodePlanner(MixedDecodes::decode_kernel, true, false, c).decode_prefix(starts, ctx), 2);
  EXPECT_EQ(MixedDecodePlanner(MixedDecodes::decode_kernel, true, true, c).decode_prefix(short_starts, ctx), 2);
  EXPECT_EQ(MixedDecodePlanner(MixedDecodes::prefill_kernel, true, true, c).decode_prefix(starts, ctx), 0);
  MixedDecodePlanner automatic(MixedDecodes::auto_select, true, true, c);
  EXPECT_EQ(automatic.decode_prefix(starts, ctx), 2);
  EXPECT_EQ(automatic.decode_prefix(short_starts, std::vector<int32_t>{3774, 3774, 3898}), 0);
  EXPECT_EQ(MixedDecodePlanner(MixedDecodes::auto_select, true, false, c).decode_prefix(starts, ctx), 0);
  EXPECT_EQ(MixedDecodePlanner(MixedDecodes::decode_kernel, false, true, c).decode_prefix(starts, ctx), 0);
  EXPECT_EQ(MixedDecodePlanner().decode_prefix(starts, ctx), 0);
  const std::vector<int32_t> decodes_only = {0, 1, 2}, two = {3774, 3774};
  EXPECT_EQ(MixedDecodePlanner(MixedDecodes::decode_kernel, true, true, c).decode_prefix(decodes_only, two), 0);
}

}  // namespace mixed_attention_plan_test
}  // namespace servelab::cuda
