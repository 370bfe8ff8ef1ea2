// The math of speculative decoding, without an engine: rejection sampling keeps the target's
// distribution whatever the draft's (a chi-square test over many seeds), and the adaptive rules
// (per-sequence k, and the per-step "does speculation pay at this batch" verdict of the cost model).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/backend/sampler.h"
#include "engine/model/config.h"
#include "engine/spec/adaptive.h"

namespace servelab {
namespace spec_rules_test {  // named, not anonymous: a unity batch shares one translation unit

/// Pearson's statistic of observed counts against expected probabilities (bins with p > 0).
double chi_square(const std::vector<int>& counts, const std::vector<float>& p, int n) {
  double x = 0.0;
  for (size_t t = 0; t < counts.size(); ++t) {
    const double e = double(p[t]) * n;
    if (e > 0) x += (counts[t] - e) * (counts[t] - e) / e;
    else EXPECT_EQ(counts[t], 0) << "token " << t << " has no target probability";
  }
  return x;
}

TEST(RejectionSampling, KeepsTheTargetDistributionWhateverTheDraft) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.5f};
  SamplingParams sp;
  sp.temperature = 0.9f;
  std::vector<float> p;
  sampling_distribution(logits, sp, p);
  // q: far from p (mass on tokens p finds unlikely), and a point mass on p's second choice.
  const std::vector<std::vector<float>> qs = {{0.05f, 0.3f, 0.3f, 0.05f, 0.1f, 0.2f},
                                              {1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}};
  const int n = 20000;
  for (const auto& q : qs) {
    std::vector<int> counts(p.size(), 0);
    int accepted = 0;
    for (int i = 0; i < n; ++i) {
      sp.seed = 7000 + uint64_t(i);
      const TokenId x = draw_from(q, uniform_draw(sp.seed, 0, 9, kStreamDraft));
      const TokenId y = verify_draft(logits, sp, 0, 9, x, q);
      ++counts[size_t(y)];
      accepted += y == x;
    }
    // df 5: P(chi2 > 20.5) = 0.001.
    EXPECT_LT(chi_square(counts, p, n), 20.5);
    // Leviathan's acceptance rate: sum over tokens of min(p, q) (binomial sd < 0.004).
    double overlap = 0.0;
    for (size_t t = 0; t < p.size(); ++t) overlap += std::min(p[t], q[t]);
    EXPECT_NEAR(double(accepted) / n, overlap, 0.02);
  }
  // What accepting every draft would give instead: q's distribution, which the test tells apart.
  std::vector<int> naive(p.size(), 0);
  for (int i = 0; i < n; ++i) ++naive[size_t(draw_from(qs[0], uniform_draw(uint64_t(i), 0, 9, kStreamDraft)))];
  EXPECT_GT(chi_square(naive, p, n), 1000.0);
}

TEST(RejectionSampling, GreedyAcceptsExactlyTheArgmaxAndCutsMatchTheSampler) {
  const std::vector<float> logits = {0.1f, 3.0f, 2.9f, -1.0f};
  SamplingParams greedy;
  const std::vector<float> q = {0.0f, 0.0f, 1.0f, 0.0f};
  EXPECT_EQ(verify_draft(logits, greedy, 0, 3, 2, q), 1);
  EXPECT_EQ(verify_draft(logits, greedy, 0, 3, 1, q), 1);
  SamplingParams cut;
  cut.temperature = 1.0f;
  cut.top_k = 2;
  std::vector<float> p;
  sampling_distribution(logits, cut, p);
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[3], 0.0f);
  EXPECT_NEAR(p[1] + p[2], 1.0, 1e-6);
  // A draft outside the target's top-k is always rejected, for a token of the top-k.
  const std::vector<float> q0 = {1.0f, 0.0f, 0.0f, 0.0f};
  for (uint64_t s = 0; s < 50; ++s) {
    cut.seed = s;
    const TokenId y = verify_draft(logits, cut, 0, 3, 0, q0);
    EXPECT_TRUE(y == 1 || y == 2) << y;
  }
  EXPECT_THROW(verify_draft(logits, cut, 0, 3, 7, q0), std::invalid_argument);
}

TEST(AdaptiveSpeculation, KFollowsAcceptance) {
  EXPECT_EQ(next_num_drafts(3, 3, 3, 8), 5);   // all accepted: +2
  EXPECT_EQ(next_num_drafts(7, 7, 7, 8), 8);   // ... up to k_max
  EXPECT_EQ(next_num_drafts(3, 3, 1, 8), 2);   // a rejection: -1
  EXPECT_EQ(next_num_drafts(1, 1, 0, 8), 1);   // ... down to 1
  EXPECT_DOUBLE_EQ(expected_tokens(0.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(expected_tokens(1.0, 4), 5.0);
  EXPECT_NEAR(expected_tokens(0.5, 2), 1.75, 1e-12);
}

TEST(AdaptiveSpeculation, PaysAtBatchOneAndTurnsOffWhenTheBatchIsComputeBound) {
  // Short contexts, so that the batch's rows (not its K/V reads) decide where decode turns
  // compute-bound on the roofline.
  SpecPricing pricing{SimCostModel::roofline(SimDevice::preset("h100")), preset("llama3-8b"), std::nullopt};
  auto verdict = [&](int batch, double alpha) {
    std::vector<DrawingSeq> seqs(size_t(batch), DrawingSeq{64, 4, alpha});
    return price_speculation(pricing, seqs);
  };
  // Batch 1 decode is bandwidth-bound: 5 rows cost about what 1 does, so drafts pay.
  const SpecVerdict one = verdict(1, 0.7);
  EXPECT_TRUE(one.speculate());
  EXPECT_LT(one.verify_s, 1.2 * one.decode_s);
  // Batch 512 is compute-bound: 5 rows a sequence cost ~5x; 2.8 expected tokens do not repay it.
  const SpecVerdict big = verdict(512, 0.7);
  EXPECT_FALSE(big.speculate());
  EXPECT_GT(big.verify_s, 3.0 * big.decode_s);
  // Drafts that are never accepted never pay; the verdict turns once as the batch grows.
  EXPECT_FALSE(verdict(1, 0.0).speculate());
  bool was_on = true;
  int turns = 0;
  for (int b = 1; b <= 512; b *= 2) {
    const bool on = verdict(b, 0.7).speculate();
    turns += on != was_on;
    was_on = on;
  }
  EXPECT_EQ(turns, 1);
  // A draft model's own steps count: a draft as large as the target never pays.
  pricing.draft = pricing.target;
  EXPECT_FALSE(verdict(1, 0.7).speculate());
}

}  // namespace spec_rules_test
}  // namespace servelab
