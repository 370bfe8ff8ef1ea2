#include "loadgen/lengths.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace servelab {

const char* to_string(LengthDistKind k) {
  switch (k) {
    case LengthDistKind::fixed: return "fixed";
    case LengthDistKind::uniform: return "uniform";
    case LengthDistKind::normal: return "normal";
    case LengthDistKind::lognormal: return "lognormal";
    case LengthDistKind::sharegpt: return "sharegpt";
  }
  return "?";
}

LengthDist sharegpt_like(LengthRole role) {
  LengthDist d;
  d.kind = LengthDistKind::sharegpt;
  d.role = role;
  d.min = 4;
  d.max = 1024;
  return d;
}

namespace {

int clamp_round(double x, int lo, int hi) {
  if (!(x == x)) return lo;  // NaN
  const double r = std::round(x);
  if (r <= lo) return lo;
  if (r >= hi) return hi;
  return static_cast<int>(r);
}

}  // namespace

int LengthDist::sample(Rng& rng) const {
  switch (kind) {
    case LengthDistKind::fixed: return value;
    case LengthDistKind::uniform: return static_cast<int>(rng.uniform_int(min, max));
    case LengthDistKind::normal: return clamp_round(mean + std * rng.normal(), min, max);
    case LengthDistKind::lognormal: {
      const double s = sigma > 0 ? sigma : std::sqrt(std::log1p((std * std) / (mean * mean)));
      const double mu = std::log(mean) - 0.5 * s * s;
      return clamp_round(std::exp(mu + s * rng.normal()), min, max);
    }
    case LengthDistKind::sharegpt: {
      // Two draws per sample whatever the branch, so request i's length uses the same
      // randomness in every plan.
      const double u = rng.uniform();
      const double z = rng.normal();
      double x;
      if (role == LengthRole::prompt)
        x = u < 0.7 ? 45.0 * std::exp(1.0 * z) : 272.0 * std::exp(0.9 * z);
      else
        x = 254.0 * std::exp(0.85 * z);
      return clamp_round(x, min, max);
    }
  }
  return value;
}

int LengthDist::lower() const { return kind == LengthDistKind::fixed ? value : min; }
int LengthDist::upper() const { return kind == LengthDistKind::fixed ? value : max; }

std::string LengthDist::describe() const {
  std::ostringstream o;
  auto range = [&] {
    if (max >= (1 << 30))
      o << " in [" << min << ", inf)";
    else
      o << " in [" << min << ", " << max << "]";
  };
  switch (kind) {
    case LengthDistKind::fixed: o << "fixed " << value; break;
    case LengthDistKind::uniform: o << "uniform[" << min << ", " << max << "]"; break;
    case LengthDistKind::normal: o << "normal(mean " << mean << ", std " << std << ")"; range(); break;
    case LengthDistKind::lognormal:
      o << "lognormal(mean " << mean;
      if (sigma > 0) o << ", sigma " << sigma << ")";
      else o << ", std " << std << ")";
      range();
      break;
    case LengthDistKind::sharegpt: o << "sharegpt-like " << (role == LengthRole::prompt ? "prompt" : "output"); range(); break;
  }
  return o.str();
}

}  // namespace servelab
