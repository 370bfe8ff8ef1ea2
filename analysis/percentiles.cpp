#include "analysis/percentiles.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "analysis/json_format.h"

namespace servelab::analysis {

double percentile_of_sorted(std::span<const double> sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("percentile of an empty sample set");
  if (!(q >= 0.0 && q <= 100.0))
    throw std::invalid_argument("percentile q must be in [0, 100] (got " + std::to_string(q) + ")");
  const double h = static_cast<double>(sorted.size() - 1) * q / 100.0;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  const double frac = h - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

Distribution summarize(std::vector<double> samples) {
  Distribution d;
  d.n = samples.size();
  if (samples.empty()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    d.mean = d.p50 = d.p90 = d.p95 = d.p99 = d.p999 = d.max = nan;
    return d;
  }
  std::sort(samples.begin(), samples.end());
  double sum = 0.0;
  for (double x : samples) sum += x;
  d.mean = sum / static_cast<double>(samples.size());
  d.p50 = percentile_of_sorted(samples, 50.0);
  d.p90 = percentile_of_sorted(samples, 90.0);
  d.p95 = percentile_of_sorted(samples, 95.0);
  d.p99 = percentile_of_sorted(samples, 99.0);
  d.p999 = percentile_of_sorted(samples, 99.9);
  d.max = samples.back();
  return d;
}

void to_json(nlohmann::ordered_json& j, const Distribution& d) {
  j = nlohmann::ordered_json::object();
  j["mean"] = json_number(d.mean);
  j["p50"] = json_number(d.p50);
  j["p90"] = json_number(d.p90);
  j["p95"] = json_number(d.p95);
  j["p99"] = json_number(d.p99);
  j["p999"] = json_number(d.p999);
  j["max"] = json_number(d.max);
}

void from_json(const nlohmann::ordered_json& j, Distribution& d) {
  if (!j.is_object()) throw std::invalid_argument("a distribution must be an object {mean, p50, ...}");
  d.mean = number_or_nan(j, "mean");
  d.p50 = number_or_nan(j, "p50");
  d.p90 = number_or_nan(j, "p90");
  d.p95 = number_or_nan(j, "p95");
  d.p99 = number_or_nan(j, "p99");
  d.p999 = number_or_nan(j, "p999");
  d.max = number_or_nan(j, "max");
  d.n = std::isnan(d.mean) && std::isnan(d.p50) && std::isnan(d.max) ? 0 : 1;
}

}  // namespace servelab::analysis
