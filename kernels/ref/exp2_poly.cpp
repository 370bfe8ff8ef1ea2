// Plain C++ reference of the FMA-pipe exp2 (kernels/ref/exp2_poly.h).
#include "kernels/ref/exp2_poly.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace servelab::kernels::exp2_poly {

float exp2_poly3(float x) {
  x = std::fmax(x, kMin);  // fmaxf: NaN -> kMin
  // The device's __fadd_rd(x, kRound) is kRound + floor(x) exactly (|floor(x)| < 2^22, ulp 1 there).
  const float fl = std::floor(x);
  const float r = kRound + fl;           // exact
  const float f = x - (r - kRound);      // both steps exact: r - kRound = floor(x), x - floor(x) in [0, 1)
  const float p = std::fma(std::fma(std::fma(kC3, f, kC2), f, kC1), f, kC0);
  const uint32_t bits = std::bit_cast<uint32_t>(p) + (std::bit_cast<uint32_t>(r) << 23);  // modulo 2^32, as the device's IADD
  return std::bit_cast<float>(bits);
}

double max_rel_error_frac(int n) {
  double worst = 0.0;
  for (int i = 0; i < n; ++i) {
    const float f = float(double(i) / n);
    const float p = std::fma(std::fma(std::fma(kC3, f, kC2), f, kC1), f, kC0);
    worst = std::max(worst, std::fabs(double(p) / std::exp2(double(f)) - 1.0));
  }
  return worst;
}

}  // namespace servelab::kernels::exp2_poly
