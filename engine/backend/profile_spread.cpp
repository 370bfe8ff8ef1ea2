#include "engine/backend/profile_spread.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace servelab {

const char* to_string(SpreadShape s) { return s == SpreadShape::even ? "even" : "exponential"; }

SpreadShape parse_spread_shape(const std::string& s) {
  if (s == "even") return SpreadShape::even;
  if (s == "exponential") return SpreadShape::exponential;
  throw std::invalid_argument("spread shape '" + s + "': expected even or exponential");
}

std::vector<int> spread_contexts(int c, int b, SpreadShape shape) {
  if (b < 2 || c < 4) throw std::invalid_argument("spread_contexts: needs b >= 2 sequences and a mean context c >= 4");
  std::vector<int> out(static_cast<size_t>(b));
  if (shape == SpreadShape::even) {
    for (int i = 0; i < b; ++i) out[size_t(i)] = c / 2 + int(int64_t(c) * i / (b - 1));  // c/2 ... c/2 + c
    return out;
  }
  // Quantiles (i + 1/2) / b of Exp(1), scaled so that their mean is exactly 1, then by c.
  std::vector<double> k(static_cast<size_t>(b));
  double sum = 0.0;
  for (int i = 0; i < b; ++i) sum += k[size_t(i)] = -std::log(1.0 - (i + 0.5) / b);
  for (int i = 0; i < b; ++i) out[size_t(i)] = std::max(1, int(std::lround(c * k[size_t(i)] * b / sum)));
  return out;
}

}  // namespace servelab
