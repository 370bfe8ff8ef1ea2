// The GPU sampler's rejection sampling, in plain C++ (verify_draft_ref, sampling_distribution_ref:
// kernels/ref/sampling_ref.h): p sums to 1 over the kept tokens only; a q equal to p accepts
// every draft; a rejected draft is never the token drawn; greedy returns the argmax; and over
// many seeds against a far-off q the acceptance rate is sum_x min(p(x), q(x)) (4 sigma).
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ref/sampling_ref.h"

namespace servelab::kernels {
namespace verify_draft_ref_test {  // named, not anonymous: a unity batch shares one translation unit

std::vector<float> random_logits(int n, std::mt19937_64& rng) {
  std::normal_distribution<float> z(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = z(rng);
  return v;
}

int32_t draw(const std::vector<float>& q, double u) {
  double cum = 0.0;
  for (size_t i = 0; i < q.size(); ++i)
    if ((cum += q[i]) > u) return int32_t(i);
  return int32_t(q.size() - 1);
}

TEST(VerifyDraftRef, TheDistributionSumsToOneOverTheKeptTokens) {
  std::mt19937_64 rng(3);
  const std::vector<float> logits = random_logits(100, rng);
  SampleParams p;
  p.temperature = 0.8f;
  p.top_k = 10;
  std::vector<float> probs;
  sampling_distribution_ref(logits, p, probs);
  double sum = 0.0;
  int kept = 0;
  for (float x : probs) {
    sum += x;
    kept += x > 0.0f;
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_EQ(kept, 10);
  p.temperature = 0.0f;
  sampling_distribution_ref(logits, p, probs);
  EXPECT_EQ(probs[size_t(argmax_ref(logits))], 1.0f);
}

TEST(VerifyDraftRef, AcceptsAtTheRateOfTheOverlapAndNeverReturnsARejectedDraft) {
  std::mt19937_64 rng(11);
  const int vocab = 16, n = 20000;
  const std::vector<float> logits = random_logits(vocab, rng);
  SampleParams p;
  p.temperature = 1.0f;
  std::vector<float> pd;
  sampling_distribution_ref(logits, p, pd);
  std::vector<float> q(vocab);
  double sum = 0.0;
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (float& x : q) sum += x = float(u01(rng));
  for (float& x : q) x = float(x / sum);
  double overlap = 0.0;
  for (int t = 0; t < vocab; ++t) overlap += std::min(pd[size_t(t)], q[size_t(t)]);
  int accepted = 0, same_as_p = 0;
  for (int i = 0; i < n; ++i) {
    p.seed = uint64_t(i);
    const int32_t x = draw(q, u01(rng));
    const int32_t t = verify_draft_ref(logits, p, x, q);
    accepted += t == x;
    // The rule: x stands exactly when u q(x) < p(x) (target stream); a rejected x is never drawn.
    EXPECT_EQ(t == x, sampling_uniform(p.seed, p.seq_key, p.position, 0) * q[size_t(x)] < pd[size_t(x)]) << i;
    // q = p: every draft stands.
    const int32_t y = draw(pd, u01(rng));
    same_as_p += verify_draft_ref(logits, p, y, pd) == y;
  }
  const double rate = double(accepted) / n, sigma = std::sqrt(overlap * (1 - overlap) / n);
  EXPECT_NEAR(rate, overlap, 4 * sigma);
  EXPECT_EQ(same_as_p, n);
  p.temperature = 0.0f;
  EXPECT_EQ(verify_draft_ref(logits, p, 0, q), argmax_ref(logits));
}

}  // namespace verify_draft_ref_test
}  // namespace servelab::kernels
