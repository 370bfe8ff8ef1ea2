#include "analysis/repeats.h"

#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "analysis/json_format.h"
#include "analysis/text_format.h"

namespace servelab::analysis {
namespace {


/// Folds the same key of several metrics objects into one (see mean_metrics).
nlohmann::ordered_json fold(const std::string& key, const std::vector<const nlohmann::ordered_json*>& xs) {
  const nlohmann::ordered_json* first = nullptr;
  for (const auto* x : xs)
    if (x && !x->is_null()) {
      first = x;
      break;
    }
  if (!first) return nullptr;
  if (first->is_object()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& [k, _] : first->items()) {
      std::vector<const nlohmann::ordered_json*> sub;
      for (const auto* x : xs) sub.push_back(x && x->is_object() && x->contains(k) ? &(*x)[k] : nullptr);
      out[k] = fold(k, sub);
    }
    return out;
  }
  if (first->is_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < first->size(); ++i) {
      std::vector<const nlohmann::ordered_json*> sub;
      for (const auto* x : xs) sub.push_back(x && x->is_array() && i < x->size() ? &(*x)[i] : nullptr);
      out.push_back(fold(key, sub));
    }
    return out;
  }
  if (first->is_boolean()) {
    bool any = false;
    for (const auto* x : xs) any = any || (x && x->is_boolean() && x->get<bool>());
    return any;
  }
  if (!first->is_number()) return *first;
  if (first->is_number_integer()) {
    int64_t sum = 0, mx = std::numeric_limits<int64_t>::min();
    for (const auto* x : xs)
      if (x && x->is_number()) {
        sum += x->get<int64_t>();
        mx = std::max(mx, x->get<int64_t>());
      }
    return key.rfind("n_", 0) == 0 ? sum : mx;  // counts add up; other integers are maxima
  }
  double sum = 0.0;
  int n = 0;
  for (const auto* x : xs)
    if (x && x->is_number()) {
      sum += x->get<double>();
      ++n;
    }
  return n ? json_number(sum / n) : nlohmann::ordered_json(nullptr);
}

}  // namespace

double student_t_975(std::size_t df) {
  if (df == 0) throw std::invalid_argument("Student t needs >= 1 degree of freedom");
  return boost::math::quantile(boost::math::students_t_distribution<double>(static_cast<double>(df)), 0.975);
}

MetricStats stats_of(const std::vector<double>& values) {
  std::vector<double> xs;
  for (double v : values)
    if (!std::isnan(v)) xs.push_back(v);
  MetricStats s;
  s.n = xs.size();
  if (xs.empty()) {
    s.mean = s.std = s.min = s.max = s.ci95_lo = s.ci95_hi = kNaN;
    return s;
  }
  std::sort(xs.begin(), xs.end());  // sums in ascending order: independent of repetition order
  double sum = 0.0;
  for (double x : xs) sum += x;
  s.mean = sum / static_cast<double>(xs.size());
  s.min = xs.front();
  s.max = xs.back();
  if (xs.size() < 2) {
    s.std = s.ci95_lo = s.ci95_hi = kNaN;
    return s;
  }
  double ss = 0.0;
  for (double x : xs) ss += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(ss / static_cast<double>(xs.size() - 1));
  const double half = student_t_975(xs.size() - 1) * s.std / std::sqrt(static_cast<double>(xs.size()));
  s.ci95_lo = s.mean - half;
  s.ci95_hi = s.mean + half;
  return s;
}

std::vector<std::string> headline_metrics(const std::vector<double>& extra_percentiles) {
  std::vector<std::string> out;
  std::vector<std::string> stats = {"mean", "p50", "p90", "p95", "p99", "p999"};
  for (double q : extra_percentiles) {
    const std::string k = percentile_key(q);
    if (q != 100.0 && std::find(stats.begin(), stats.end(), k) == stats.end()) stats.push_back(k);
  }
  for (const char* d : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
    for (const auto& st : stats) out.push_back(std::string(d) + "." + st);
  for (const char* m : {"request_throughput_rps", "output_throughput_tok_s", "total_throughput_tok_s",
                        "goodput_tok_s", "request_goodput_rps", "slo_attainment"})
    out.push_back(m);
  return out;
}

std::string repetition_label(const std::string& label, int k, int n_repeats) {
  return n_repeats <= 1 ? label : label + "#" + std::to_string(k);
}

double metric_at(const nlohmann::ordered_json& metrics, const std::string& path) {
  const nlohmann::ordered_json* node = &metrics;
  std::size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object()) return kNaN;
    auto it = node->find(key);
    if (it == node->end()) return kNaN;
    node = &*it;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return node->is_number() ? node->get<double>() : kNaN;
}

RunMetrics mean_metrics(const std::vector<RunMetrics>& repetitions) {
  if (repetitions.empty()) return RunMetrics{};
  if (repetitions.size() == 1) return repetitions.front();
  std::vector<nlohmann::ordered_json> js;
  for (const auto& m : repetitions) js.push_back(m);
  std::vector<const nlohmann::ordered_json*> ptrs;
  for (const auto& j : js) ptrs.push_back(&j);
  RunMetrics out = fold("", ptrs).get<RunMetrics>();
  for (const auto& m : repetitions) {
    out.n_requests += m.n_requests;
    out.n_failed += m.n_failed;
  }
  for (auto& p : out.slo_percentiles) p.met = std::isfinite(p.value_ms) && p.value_ms <= p.slo.max_ms + 1e-6;
  return out;
}

void to_json(nlohmann::ordered_json& j, const MetricStats& s) {
  j = {{"n", s.n},
       {"mean", json_number(s.mean)},
       {"std", json_number(s.std)},
       {"min", json_number(s.min)},
       {"max", json_number(s.max)},
       {"ci95", {json_number(s.ci95_lo), json_number(s.ci95_hi)}}};
}

void from_json(const nlohmann::ordered_json& j, MetricStats& s) {
  s.n = j.value("n", std::size_t{0});
  s.mean = number_or_nan(j, "mean");
  s.std = number_or_nan(j, "std");
  s.min = number_or_nan(j, "min");
  s.max = number_or_nan(j, "max");
  s.ci95_lo = s.ci95_hi = kNaN;
  if (auto it = j.find("ci95"); it != j.end() && it->is_array() && it->size() == 2) {
    if ((*it)[0].is_number()) s.ci95_lo = (*it)[0].get<double>();
    if ((*it)[1].is_number()) s.ci95_hi = (*it)[1].get<double>();
  }
}

}  // namespace servelab::analysis
