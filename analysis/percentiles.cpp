#include "analysis/percentiles.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

namespace {

constexpr double kFixedQs[] = {50.0, 90.0, 95.0, 99.0, 99.9, 100.0};

bool is_fixed(double q) {
  for (double f : kFixedQs)
    if (q == f) return true;
  return false;
}

}  // namespace

double Distribution::at(double q) const {
  if (q == 50.0) return p50;
  if (q == 90.0) return p90;
  if (q == 95.0) return p95;
  if (q == 99.0) return p99;
  if (q == 99.9) return p999;
  if (q == 100.0) return max;
  for (const auto& [eq, v] : extra)
    if (eq == q) return v;
  return std::numeric_limits<double>::quiet_NaN();
}

std::string percentile_key(double q) {
  if (q == 99.9) return "p999";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", q);
  std::string s = buf;
  for (char& c : s)
    if (c == '.') c = '_';
  return "p" + s;
}

std::optional<double> parse_percentile_key(const std::string& key) {
  if (key == "p999") return 99.9;
  if (key.size() < 2 || key[0] != 'p') return std::nullopt;
  std::string digits = key.substr(1);
  int n_sep = 0;
  for (char& c : digits) {
    if (c == '_') {
      c = '.';
      ++n_sep;
    } else if (c < '0' || c > '9') {
      return std::nullopt;
    }
  }
  if (n_sep > 1 || digits.front() == '.' || digits.back() == '.') return std::nullopt;
  const double q = std::stod(digits);
  if (!(q >= 0.0 && q <= 100.0)) return std::nullopt;
  return q;
}

Distribution summarize(std::vector<double> samples, const std::vector<double>& extra_qs) {
  Distribution d;
  d.n = samples.size();
  std::vector<double> qs;
  for (double q : extra_qs)
    if (!is_fixed(q) && std::find(qs.begin(), qs.end(), q) == qs.end()) qs.push_back(q);
  std::sort(qs.begin(), qs.end());
  if (samples.empty()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    d.mean = d.p50 = d.p90 = d.p95 = d.p99 = d.p999 = d.max = nan;
    for (double q : qs) d.extra.emplace_back(q, nan);
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
  for (double q : qs) d.extra.emplace_back(q, percentile_of_sorted(samples, q));
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
  for (const auto& [q, v] : d.extra) j[percentile_key(q)] = json_number(v);
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
  d.extra.clear();
  for (const auto& [k, v] : j.items()) {
    if (k == "p50" || k == "p90" || k == "p95" || k == "p99" || k == "p999") continue;
    const auto q = parse_percentile_key(k);
    if (q && (v.is_number() || v.is_null())) d.extra.emplace_back(*q, v.is_null() ? std::nan("") : v.get<double>());
  }
  std::sort(d.extra.begin(), d.extra.end());
  d.n = std::isnan(d.mean) && std::isnan(d.p50) && std::isnan(d.max) ? 0 : 1;
}

}  // namespace servelab::analysis
