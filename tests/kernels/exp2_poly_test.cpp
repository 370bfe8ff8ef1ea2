// The FMA-pipe exp2 of the prefill kernels' fa7 variants (kernels/ref/exp2_poly.h): its error over
// the range the softmax feeds it, and the exact values the kernels' invariance rests on.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "kernels/ref/exp2_poly.h"

namespace servelab::kernels {
namespace {

using exp2_poly::exp2_poly3;

// P goes to bf16 (8 bits: half an ulp is 2^-9 relative) or f16 (2^-12) for P·V: the polynomial
// must stay below bf16's 2^-8 (the brief's bound); it is far below f16's too.
constexpr double kBf16Bound = 1.0 / 256.0;
constexpr double kMeasured = 1e-4;  // FlashAttention-4's fit: 8.8e-5 on [0, 1)

TEST(Exp2Poly, FractionPolynomialErrorIsFarBelowBf16) {
  const double e = exp2_poly::max_rel_error_frac(1 << 22);
  EXPECT_LT(e, kBf16Bound);
  EXPECT_LT(e, kMeasured);
  EXPECT_GT(e, 1e-5);  // a degree-3 fit, not exp2 itself: the check measures something
}

TEST(Exp2Poly, RelativeErrorOverTheSoftmaxRange) {
  // Every x = -k / 4096 in [-126, 0] (516 k points) and 1 M random floats in (-126, 1e-3].
  double worst = 0.0;
  for (int k = 0; k <= 126 * 4096; ++k) {
    const float x = -float(k) / 4096.0f;
    worst = std::max(worst, std::fabs(double(exp2_poly3(x)) / std::exp2(double(x)) - 1.0));
  }
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> d(-126.0f, 1e-3f);
  for (int i = 0; i < (1 << 20); ++i) {
    const float x = d(rng);
    worst = std::max(worst, std::fabs(double(exp2_poly3(x)) / std::exp2(double(x)) - 1.0));
  }
  EXPECT_LT(worst, kBf16Bound);
  EXPECT_LT(worst, kMeasured);
}

TEST(Exp2Poly, ExactWhereTheKernelsNeedIt) {
  // A masked score: -inf -> +0 exactly (so a tile a row masks whole adds exactly nothing).
  const float z = exp2_poly3(-std::numeric_limits<float>::infinity());
  EXPECT_EQ(std::bit_cast<uint32_t>(z), 0u);
  EXPECT_EQ(exp2_poly3(0.0f), 1.0f);  // a row's maximum: P = 1 exactly
  for (int k = 0; k <= 126; ++k) EXPECT_EQ(exp2_poly3(-float(k)), std::ldexp(1.0f, -k)) << k;
  EXPECT_EQ(std::bit_cast<uint32_t>(exp2_poly3(-127.0f)), 0u);
  EXPECT_EQ(std::bit_cast<uint32_t>(exp2_poly3(-1000.0f)), 0u);
  EXPECT_EQ(std::bit_cast<uint32_t>(exp2_poly3(std::numeric_limits<float>::quiet_NaN())), 0u);
}

TEST(Exp2Poly, BelowTheNormalRangeStaysUnder2PowMinus126) {
  // (-127, -126): a value under 2^-126, where ex2.approx.ftz gives 0: never more than it should.
  for (int k = 1; k < 4096; ++k) {
    const float y = exp2_poly3(-127.0f + float(k) / 4096.0f);
    EXPECT_GE(y, 0.0f) << k;
    EXPECT_LT(y, std::ldexp(1.0f, -126)) << k;
  }
}

TEST(Exp2Poly, MonotoneAcrossIntegerSteps) {
  // p(1-) = 1.99983 < 2 · p(0): no step down where floor(x) changes, none inside a unit.
  float prev = exp2_poly3(-20.0f);
  for (int k = 1; k <= 20 * 4096 + 8; ++k) {
    const float y = exp2_poly3(-20.0f + float(k) / 4096.0f);
    ASSERT_GE(y, prev) << k;
    prev = y;
  }
}

}  // namespace
}  // namespace servelab::kernels
