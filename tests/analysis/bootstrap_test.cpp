#include "analysis/bootstrap.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "analysis/metrics.h"
#include "analysis/percentiles.h"

namespace servelab::analysis {
namespace {

/// n requests arriving at 0 whose TTFTs are 1 + i / (n - 1) seconds: uniform over [1, 2].
std::vector<RequestRecord> uniform_ttfts(int n) {
  std::vector<RequestRecord> out(n);
  for (int i = 0; i < n; ++i) {
    RequestRecord& r = out[i];
    r.run = "r";
    r.id = uint64_t(i);
    r.first_token_s = 1.0 + double(i) / (n - 1);
    r.token_times_s = {r.first_token_s, r.first_token_s + 0.01};
    r.end_s = r.first_token_s + 0.01;
    r.prompt_tokens = 8;
    r.output_tokens = 2;
  }
  return out;
}

std::vector<double> ttft_p50(const std::vector<RequestRecord>& records) {
  std::vector<double> t;
  for (const RequestRecord& r : records) t.push_back(r.first_token_s - r.arrival_s);
  std::sort(t.begin(), t.end());
  return {percentile_of_sorted(t, 50)};
}

TEST(Bootstrap, MedianNoiseOfAUniformSampleIsWhatTheBinomialSays) {
  // The median of n uniform draws over [1, 2] has a standard error of about 0.5 / sqrt(n) in units
  // of the range: 95% half-width 1.96 x 0.025 = 0.049 at n = 400, relative to the median 1.5: 3.3%.
  const std::vector<double> h = bootstrap_relative_halfwidths(uniform_ttfts(400), ttft_p50, 400);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_GT(h[0], 0.022);
  EXPECT_LT(h[0], 0.045);
  // Four times the requests: half the noise.
  const double quarter = bootstrap_relative_halfwidths(uniform_ttfts(1600), ttft_p50, 400)[0];
  EXPECT_NEAR(quarter / h[0], 0.5, 0.15);
}

TEST(Bootstrap, SeededAndZeroForIdenticalRequests) {
  const std::vector<RequestRecord> r = uniform_ttfts(50);
  EXPECT_EQ(bootstrap_relative_halfwidths(r, ttft_p50, 50, 0.95, 7), bootstrap_relative_halfwidths(r, ttft_p50, 50, 0.95, 7));
  std::vector<RequestRecord> same(20, r[10]);
  EXPECT_DOUBLE_EQ(bootstrap_relative_halfwidths(same, ttft_p50, 20)[0], 0.0);
  EXPECT_THROW(bootstrap_relative_halfwidths({}, ttft_p50), std::invalid_argument);
  EXPECT_THROW(bootstrap_relative_halfwidths(r, ttft_p50, 5), std::invalid_argument);
  EXPECT_THROW(bootstrap_relative_halfwidths(r, ttft_p50, 50, 1.0), std::invalid_argument);
}

TEST(Bootstrap, ResamplesWithRepeatedRequestsGoThroughComputeMetrics) {
  const std::vector<RequestRecord> r = uniform_ttfts(100);
  const std::vector<double> h = bootstrap_relative_halfwidths(r, [](const std::vector<RequestRecord>& s) {
    const RunMetrics m = compute_metrics("r", s, {}, {});
    return std::vector<double>{m.ttft_ms.p50, m.ttft_ms.p99};
  }, 50);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_GT(h[0], 0.0);
  EXPECT_GT(h[1], 0.0);
}

}  // namespace
}  // namespace servelab::analysis
