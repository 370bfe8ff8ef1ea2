#include "loadgen/rng.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/fast_remainder.h"
#include "engine/splitmix64.h"

namespace servelab {

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) {
    x += 0x9e3779b97f4a7c15ull;
    s = splitmix64(x);
  }
}

Rng Rng::stream(uint64_t seed, RngStream stream, uint64_t index) {
  return Rng(splitmix64(splitmix64(seed) ^ splitmix64(static_cast<uint64_t>(stream) * 0x632be59bd9b4e019ull + index)));
}

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/// xoshiro256** over state s.
inline uint64_t xoshiro_next(uint64_t* s) {
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}
}  // namespace

uint64_t Rng::next_u64() { return xoshiro_next(s_); }

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

int64_t Rng::uniform_int(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
  if (range == 0) return static_cast<int64_t>(next_u64());  // the full 64-bit range
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return lo + static_cast<int64_t>(x % range);
}

void Rng::uniform_ints(int64_t lo, int64_t hi, int32_t* out, size_t n) {
  if (hi <= lo) {
    std::fill_n(out, n, static_cast<int32_t>(lo));
    return;
  }
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;  // >= 2: hi > lo, both within int32
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;     // as uniform_int: reject x >= limit
  const FastRemainder rem(range);  // x % range without a division a draw
  // The state in locals (registers) for the loop, not reloaded and stored back around every
  // write to out; the same draws as next_u64 a token.
  uint64_t s[4] = {s_[0], s_[1], s_[2], s_[3]};
  for (size_t i = 0; i < n; ++i) {
    uint64_t x;
    do x = xoshiro_next(s);
    while (x >= limit);
    out[i] = static_cast<int32_t>(lo + static_cast<int64_t>(rem.of(x)));
  }
  std::copy_n(s, 4, s_);
}

double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double r = std::sqrt(-2.0 * std::log(uniform_open0()));
  const double theta = 2.0 * std::numbers::pi * uniform();
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

double Rng::exponential() { return -std::log(uniform_open0()); }

double Rng::gamma(double shape) {
  if (shape < 1.0) {
    // Gamma(a) = Gamma(a + 1) * U^(1/a) (Marsaglia & Tsang, 2000, note 8).
    const double g = gamma(shape + 1.0);
    return g * std::pow(uniform_open0(), 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniform_open0();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

}  // namespace servelab
