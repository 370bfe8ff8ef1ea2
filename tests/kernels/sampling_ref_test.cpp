#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "kernels/philox.h"
#include "kernels/ref/sampling_ref.h"
#include "tests/kernels/kv_fixture.h"

namespace servelab::kernels {
namespace {

SampleParams params(float t, int k = 0, float p = 1.0f, uint64_t seed = 7) {
  SampleParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.seed = seed;
  return s;
}

TEST(Philox, KnownAnswerFromRandom123) {
  // Random123's kat_vectors: philox4x32_10 with counter and key all zero / all 0xffffffff.
  const Philox4 z = philox4x32(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(z.v[0], 0x6627e8d5u);
  EXPECT_EQ(z.v[1], 0xe169c58du);
  EXPECT_EQ(z.v[2], 0xbc57ac4cu);
  EXPECT_EQ(z.v[3], 0x9b00dbd8u);
  const uint32_t f = 0xffffffffu;
  const Philox4 o = philox4x32(f, f, f, f, f, f);
  EXPECT_EQ(o.v[0], 0x408f276du);
  EXPECT_EQ(o.v[1], 0x41c83b0eu);
  EXPECT_EQ(o.v[2], 0xa20bc7c6u);
  EXPECT_EQ(o.v[3], 0x6d5451fdu);
}

TEST(SamplingRef, GreedyLowestIndexOnTiesAndIgnoresNan) {
  EXPECT_EQ(sample_ref(std::vector<float>{0.1f, 2.0f, -1.0f, 2.0f}, params(0.0f)), 1);
  EXPECT_EQ(sample_ref(std::vector<float>{NAN, -5.0f, -4.0f, NAN}, params(0.0f)), 2);
  EXPECT_EQ(sample_ref(std::vector<float>{NAN, NAN}, params(1.0f)), 0);
  EXPECT_EQ(sample_ref(std::vector<float>{0.0f, 3.0f, 1.0f}, params(1.0f, 1)), 1);  // top_k 1 is greedy
}

TEST(SamplingRef, ReproduciblePerSeedAndPositionAndSeqKey) {
  std::mt19937_64 rng(1);
  const std::vector<float> logits = testing::random_bf16(1000, rng, 2.0f);
  int differ_seed = 0, differ_pos = 0, differ_key = 0;
  for (int pos = 0; pos < 50; ++pos) {
    SampleParams p = params(1.0f, 0, 1.0f, 42);
    p.position = pos;
    const int32_t a = sample_ref(logits, p);
    EXPECT_EQ(a, sample_ref(logits, p));
    SampleParams q = p;
    q.seed = 43;
    differ_seed += sample_ref(logits, q) != a;
    q = p;
    q.position = pos + 1000;
    differ_pos += sample_ref(logits, q) != a;
    q = p;
    q.seq_key = 1;
    differ_key += sample_ref(logits, q) != a;
  }
  EXPECT_GT(differ_seed, 10);
  EXPECT_GT(differ_pos, 10);
  EXPECT_GT(differ_key, 10);
}

TEST(SamplingRef, FrequenciesFollowSoftmax) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f};
  const float t = 0.8f;
  std::vector<double> p(4);
  double z = 0;
  for (int i = 0; i < 4; ++i) z += (p[i] = std::exp(logits[i] / t));
  std::vector<int> counts(4, 0);
  const int n = 20000;
  for (int pos = 0; pos < n; ++pos) {
    SampleParams s = params(t);
    s.position = pos;
    ++counts[sample_ref(logits, s)];
  }
  for (int i = 0; i < 4; ++i) {
    const double expect = n * p[i] / z, sd = std::sqrt(expect);
    EXPECT_NEAR(counts[i], expect, 5 * sd) << i;
  }
}

TEST(SamplingRef, TopKAndTopPKeepOnlyTheHead) {
  const std::vector<float> logits = {0.0f, 3.0f, 2.9f, 1.0f, -2.0f, 2.8f};
  std::map<int, int> seen_k, seen_p;
  for (int pos = 0; pos < 2000; ++pos) {
    SampleParams k = params(5.0f, 3);  // hot: without the cut every token would show up
    k.position = pos;
    ++seen_k[sample_ref(logits, k)];
    SampleParams p = params(1.0f, 0, 0.5f);
    p.position = pos;
    ++seen_p[sample_ref(logits, p)];
  }
  EXPECT_EQ(seen_k.size(), 3u);
  EXPECT_TRUE(seen_k.count(1) && seen_k.count(2) && seen_k.count(5));
  // softmax of (3, 2.9, 2.8, 1, 0, -2): token 1 has 0.34 < 0.5, tokens 1+2 have 0.65 >= 0.5.
  EXPECT_EQ(seen_p.size(), 2u);
  EXPECT_TRUE(seen_p.count(1) && seen_p.count(2));
}

TEST(SamplingRef, TiesAtTheThresholdAreAllKept) {
  const std::vector<float> logits = {1.0f, 5.0f, 5.0f, 5.0f, 0.0f};
  std::map<int, int> seen;
  for (int pos = 0; pos < 500; ++pos) {
    SampleParams k = params(1.0f, 2);
    k.position = pos;
    ++seen[sample_ref(logits, k)];
  }
  EXPECT_EQ(seen.size(), 3u);  // all three tied maxima
  EXPECT_FALSE(seen.count(0) || seen.count(4));
}

}  // namespace
}  // namespace servelab::kernels
