// Length distributions: bounds, means, and the ShareGPT-like mix's means.
#include <gtest/gtest.h>

#include <cmath>

#include "loadgen/lengths.h"

namespace servelab {
namespace {

double mean_of(const LengthDist& d, int n, uint64_t seed, int* lo = nullptr, int* hi = nullptr) {
  Rng rng(seed);
  double sum = 0;
  int mn = 1 << 30, mx = -1;
  for (int i = 0; i < n; ++i) {
    const int v = d.sample(rng);
    sum += v;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  if (lo) *lo = mn;
  if (hi) *hi = mx;
  return sum / n;
}

TEST(Lengths, ShareGptLikeMeans) {
  int lo = 0, hi = 0;
  const double p = mean_of(sharegpt_like(LengthRole::prompt), 20000, 11, &lo, &hi);
  EXPECT_NEAR(p, 161.0, 161.0 * 0.05);
  EXPECT_GE(lo, 4);
  EXPECT_LE(hi, 1024);
  const double o = mean_of(sharegpt_like(LengthRole::output), 20000, 12, &lo, &hi);
  EXPECT_NEAR(o, 338.0, 338.0 * 0.05);
  EXPECT_GE(lo, 4);
  EXPECT_LE(hi, 1024);
}

TEST(Lengths, FixedUniformNormalLognormal) {
  LengthDist fixed;
  fixed.value = 17;
  int lo = 0, hi = 0;
  EXPECT_EQ(mean_of(fixed, 100, 1, &lo, &hi), 17.0);

  LengthDist u;
  u.kind = LengthDistKind::uniform;
  u.min = 10;
  u.max = 20;
  EXPECT_NEAR(mean_of(u, 20000, 2, &lo, &hi), 15.0, 0.15);
  EXPECT_EQ(lo, 10);
  EXPECT_EQ(hi, 20);

  LengthDist n;
  n.kind = LengthDistKind::normal;
  n.mean = 200;
  n.std = 20;
  EXPECT_NEAR(mean_of(n, 20000, 3), 200.0, 1.0);
  n.min = 195;
  n.max = 205;
  mean_of(n, 2000, 3, &lo, &hi);
  EXPECT_EQ(lo, 195);
  EXPECT_EQ(hi, 205);

  LengthDist ln;
  ln.kind = LengthDistKind::lognormal;
  ln.mean = 300;
  ln.std = 150;  // lengths' own mean and std
  EXPECT_NEAR(mean_of(ln, 40000, 4), 300.0, 300 * 0.02);
  ln.std = 0;
  ln.sigma = 0.5;  // log-space spread, same mean
  EXPECT_NEAR(mean_of(ln, 40000, 5), 300.0, 300 * 0.02);
}

TEST(Lengths, Describe) {
  LengthDist u;
  u.kind = LengthDistKind::uniform;
  u.min = 32;
  u.max = 128;
  EXPECT_EQ(u.describe(), "uniform[32, 128]");
  EXPECT_EQ(sharegpt_like(LengthRole::output).describe(), "sharegpt-like output in [4, 1024]");
}

}  // namespace
}  // namespace servelab
