#include "engine/backend/host_overhead.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace servelab {

HostOverhead HostOverhead::fit(std::span<const std::pair<double, double>> pts) {
  if (pts.empty()) throw std::invalid_argument("host overhead: no (sequences, seconds) points to fit");
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : pts) {
    if (!std::isfinite(x) || !std::isfinite(y) || x < 0 || y < 0)
      throw std::invalid_argument("host overhead: points must be finite and >= 0 (got " + std::to_string(x) + ", " +
                                  std::to_string(y) + ")");
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double n = static_cast<double>(pts.size());
  const double var = sxx - sx * sx / n;
  HostOverhead h;
  if (var <= 1e-12 * std::max(1.0, sxx)) {  // one batch size: a constant
    h.per_step_s = sy / n;
    return h;
  }
  h.per_seq_s = (sxy - sx * sy / n) / var;
  h.per_step_s = (sy - h.per_seq_s * sx) / n;
  if (h.per_seq_s < 0) {
    h = {sy / n, 0.0};
  } else if (h.per_step_s < 0) {  // through the origin
    h = {0.0, sxx > 0 ? sxy / sxx : 0.0};
  }
  return h;
}

}  // namespace servelab
