#include <cmath>
#include <map>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/sampler.h"

namespace servelab {
namespace {

SamplingParams with_temperature(float t, uint64_t seed = 7) {
  SamplingParams p;
  p.temperature = t;
  p.seed = seed;
  return p;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p(logits.size());
  double max_l = -INFINITY, sum = 0.0;
  for (float l : logits) max_l = std::max<double>(max_l, l / temperature);
  for (size_t i = 0; i < logits.size(); ++i) sum += (p[i] = std::exp(logits[i] / temperature - max_l));
  for (double& x : p) x /= sum;
  return p;
}

std::vector<int> histogram(const std::vector<float>& logits, const SamplingParams& p, int n_draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int pos = 0; pos < n_draws; ++pos) ++counts.at(sample_token(logits, p, 0, pos));
  return counts;
}

TEST(Sampler, GreedyPicksArgmaxLowestIndexOnTies) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  EXPECT_EQ(sample_token(logits, with_temperature(0.0f), 3, 11), 1);
  const std::vector<float> with_nan = {NAN, -5.0f, -4.0f, NAN};
  EXPECT_EQ(sample_token(with_nan, with_temperature(0.0f), 0, 0), 2);
  EXPECT_EQ(argmax_token(std::vector<float>{-INFINITY, -INFINITY}), 0);
}

TEST(Sampler, TopKOneEqualsGreedy) {
  const std::vector<float> logits = {0.3f, 1.5f, 1.5f, -2.0f, 1.4f, 0.0f};
  SamplingParams p = with_temperature(1.3f);
  p.top_k = 1;
  for (int pos = 0; pos < 200; ++pos) EXPECT_EQ(sample_token(logits, p, 5, pos), 1);
}

TEST(Sampler, SameSeedKeyAndPositionGiveSameToken) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.7 * i);
  SamplingParams p = with_temperature(1.0f, 1234);
  p.top_p = 0.9f;
  int n_differ_by_key = 0, n_differ_by_seed = 0;
  for (int pos = 0; pos < 300; ++pos) {
    const TokenId a = sample_token(logits, p, 2, pos);
    EXPECT_EQ(a, sample_token(logits, p, 2, pos));  // a pure function
    n_differ_by_key += a != sample_token(logits, p, 3, pos);
    SamplingParams other = p;
    other.seed = 1235;
    n_differ_by_seed += a != sample_token(logits, other, 2, pos);
  }
  // Other keys and seeds give other streams (50 tokens: agreement by chance is rare).
  EXPECT_GT(n_differ_by_key, 150);
  EXPECT_GT(n_differ_by_seed, 150);
}

TEST(Sampler, UniformDrawIsInUnitIntervalAndSpread) {
  double sum = 0.0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double u = uniform_draw(42, 0, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.02);
  EXPECT_NE(uniform_draw(1, 2, 3), uniform_draw(1, 3, 2));
}

// Chi-square over 6 categories (5 degrees of freedom): the bound 40 has p < 1e-6 under the
// null, and the draws are a pure function of the seed, so this never flakes.
TEST(Sampler, DistributionMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, 0.2f};
  for (float temperature : {0.7f, 1.0f, 1.8f}) {
    const int n = 30000;
    const std::vector<int> counts = histogram(logits, with_temperature(temperature), n);
    const std::vector<double> expected = softmax(logits, temperature);
    double chi2 = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
      const double e = expected[i] * n;
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    EXPECT_LT(chi2, 40.0) << "temperature " << temperature;
  }
}

TEST(Sampler, TopKKeepsOnlyTheKMostLikely) {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.9f, -1.0f, 2.0f};
  SamplingParams p = with_temperature(5.0f);  // flat: every token would otherwise appear
  p.top_k = 3;
  const std::vector<int> counts = histogram(logits, p, 3000);
  EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[3], 0);
  EXPECT_GT(counts[5], 0);
}

TEST(Sampler, TopPExcludesTheTail) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: the nucleus for top_p 0.75 is {0, 1}.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p = with_temperature(1.0f);
  p.top_p = 0.75f;
  const int n = 8000;
  const std::vector<int> counts = histogram(logits, p, n);
  EXPECT_EQ(counts[2], 0);
  EXPECT_EQ(counts[3], 0);
  // Renormalized over the nucleus: token 0 has 0.5 / 0.8 = 0.625.
  EXPECT_NEAR(double(counts[0]) / n, 0.625, 0.03);
  // A top_p smaller than the top token keeps only it.
  p.top_p = 0.1f;
  for (int pos = 0; pos < 100; ++pos) EXPECT_EQ(sample_token(logits, p, 0, pos), 0);
}

TEST(Sampler, TopKAndTopPTogether) {
  const std::vector<float> logits = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  SamplingParams p = with_temperature(1.0f);
  p.top_k = 3;      // renormalized: 4/9, 3/9, 2/9
  p.top_p = 0.7f;   // 4/9 < 0.7 <= 7/9: keeps {0, 1}
  const std::vector<int> counts = histogram(logits, p, 4000);
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_GT(counts[1], 0);
}

TEST(Sampler, RejectsBadParameters) {
  const std::vector<float> logits = {1.0f, 2.0f};
  EXPECT_THROW(sample_token({}, with_temperature(0.0f), 0, 0), std::invalid_argument);
  EXPECT_THROW(sample_token(logits, with_temperature(-1.0f), 0, 0), std::invalid_argument);
  SamplingParams p = with_temperature(1.0f);
  p.top_p = 0.0f;
  EXPECT_THROW(sample_token(logits, p, 0, 0), std::invalid_argument);
  p.top_p = 1.0f;
  p.top_k = -2;
  EXPECT_THROW(sample_token(logits, p, 0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
