// Arrival processes: means, CVs, and a Kolmogorov–Smirnov test of Poisson gaps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "loadgen/arrivals.h"

namespace servelab {
namespace {

struct GapStats {
  double mean = 0, cv = 0;
};

std::vector<double> gaps_of(const std::vector<double>& t) {
  std::vector<double> g;
  for (size_t i = 1; i < t.size(); ++i) g.push_back(t[i] - t[i - 1]);
  return g;
}

GapStats stats(const std::vector<double>& g) {
  double sum = 0, sq = 0;
  for (double x : g) sum += x;
  const double mean = sum / g.size();
  for (double x : g) sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sq / (g.size() - 1)) / mean};
}

TEST(Arrivals, PoissonMeanCvAndKolmogorovSmirnov) {
  const double rate = 4.0;
  const int n = 20001;
  Rng rng(12345);
  const auto t = arrival_times({ArrivalProcess::poisson}, rate, n, rng);
  ASSERT_EQ(t.size(), static_cast<size_t>(n));
  EXPECT_EQ(t[0], 0.0);
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  auto g = gaps_of(t);
  const GapStats s = stats(g);
  EXPECT_NEAR(s.mean, 1.0 / rate, 0.03 / rate);  // ±3% (std error of the mean is 0.7%)
  EXPECT_NEAR(s.cv, 1.0, 0.03);
  // KS statistic of the gaps against the exponential CDF 1 - exp(-rate x).
  std::sort(g.begin(), g.end());
  double d = 0;
  const double m = static_cast<double>(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double f = 1.0 - std::exp(-rate * g[i]);
    d = std::max({d, (i + 1) / m - f, f - i / m});
  }
  const double critical = 1.628 / std::sqrt(m);  // α = 0.01
  EXPECT_LT(d, critical) << "D = " << d;
  // And it does reject the wrong rate: the test has power.
  double d_wrong = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double f = 1.0 - std::exp(-1.1 * rate * g[i]);
    d_wrong = std::max({d_wrong, (i + 1) / m - f, f - i / m});
  }
  EXPECT_GT(d_wrong, critical);
}

TEST(Arrivals, GammaHasTheRequestedCv) {
  for (double cv : {2.0, 0.5}) {
    Rng rng(7);
    const auto g = gaps_of(arrival_times({ArrivalProcess::gamma, cv}, 10.0, 40001, rng));
    const GapStats s = stats(g);
    EXPECT_NEAR(s.mean, 0.1, 0.1 * 0.05) << "cv " << cv;
    EXPECT_NEAR(s.cv, cv, cv * 0.06) << "cv " << cv;
  }
}

TEST(Arrivals, ConstantGapsAreExact) {
  Rng rng(1);
  const auto t = arrival_times({ArrivalProcess::constant}, 8.0, 100, rng);
  for (size_t i = 1; i < t.size(); ++i) EXPECT_NEAR(t[i] - t[i - 1], 0.125, 1e-12);
  EXPECT_NEAR(t.back(), 99 * 0.125, 1e-9);
}

TEST(Arrivals, RateOnlyScalesTheTimes) {
  Rng a(3), b(3);
  const auto t1 = arrival_times({ArrivalProcess::gamma, 1.5}, 1.0, 50, a);
  const auto t4 = arrival_times({ArrivalProcess::gamma, 1.5}, 4.0, 50, b);
  for (size_t i = 0; i < t1.size(); ++i) EXPECT_NEAR(t4[i], t1[i] / 4.0, 1e-9);
}

TEST(Arrivals, InfiniteRateSendsEverythingAtOnceAndBadRatesThrow) {
  Rng rng(1);
  for (double t : arrival_times({ArrivalProcess::poisson}, INFINITY, 10, rng)) EXPECT_EQ(t, 0.0);
  EXPECT_THROW(arrival_times({ArrivalProcess::poisson}, 0.0, 10, rng), std::invalid_argument);
  EXPECT_THROW(arrival_times({ArrivalProcess::poisson}, -1.0, 10, rng), std::invalid_argument);
}

TEST(Rng, SameSeedSameStreamDifferentStreamsDiffer) {
  Rng a = Rng::stream(5, RngStream::prompt_lengths), b = Rng::stream(5, RngStream::prompt_lengths);
  Rng c = Rng::stream(5, RngStream::arrivals), d = Rng::stream(5, RngStream::tokens, 1);
  const uint64_t x = a.next_u64();
  EXPECT_EQ(x, b.next_u64());
  EXPECT_NE(x, c.next_u64());
  EXPECT_NE(x, d.next_u64());
  Rng u(9);
  for (int i = 0; i < 1000; ++i) {
    const int64_t v = u.uniform_int(2, 5);
    ASSERT_GE(v, 2);
    ASSERT_LE(v, 5);
  }
}

}  // namespace
}  // namespace servelab
