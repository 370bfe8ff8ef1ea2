#include "analysis/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "analysis/percentiles.h"
#include "engine/splitmix64.h"

namespace servelab::analysis {

std::vector<double> bootstrap_relative_halfwidths(const std::vector<RequestRecord>& records,
                                                  const RecordStatistics& statistics, int n_resamples, double level,
                                                  uint64_t seed) {
  if (records.empty()) throw std::invalid_argument("bootstrap needs at least one record");
  if (n_resamples < 10) throw std::invalid_argument("bootstrap needs >= 10 resamples (got " + std::to_string(n_resamples) + ")");
  if (!(level > 0.0 && level < 1.0)) throw std::invalid_argument("bootstrap level must be in (0, 1)");
  const std::vector<double> base = statistics(records);
  std::vector<std::vector<double>> draws(base.size());
  std::vector<RequestRecord> sample(records.size());
  uint64_t state = seed;
  for (int r = 0; r < n_resamples; ++r) {
    for (RequestRecord& s : sample) s = records[splitmix64_next(state) % records.size()];
    const std::vector<double> v = statistics(sample);
    for (size_t k = 0; k < base.size() && k < v.size(); ++k)
      if (std::isfinite(v[k])) draws[k].push_back(v[k]);
  }
  std::vector<double> out(base.size(), NAN);
  const double tail = (1.0 - level) / 2.0 * 100.0;
  for (size_t k = 0; k < base.size(); ++k) {
    if (draws[k].size() < 2 || !std::isfinite(base[k]) || base[k] == 0.0) continue;
    std::sort(draws[k].begin(), draws[k].end());
    const double lo = percentile_of_sorted(draws[k], tail), hi = percentile_of_sorted(draws[k], 100.0 - tail);
    out[k] = (hi - lo) / 2.0 / std::abs(base[k]);
  }
  return out;
}

}  // namespace servelab::analysis
