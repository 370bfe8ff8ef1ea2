#include "analysis/gates.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "analysis/compare.h"
#include "analysis/json_format.h"
#include "analysis/text_format.h"
#include "loadgen/records/gate_metrics.h"

namespace servelab::analysis {
namespace {

/// Summary paths of every gate-able metric, from the one registry (loadgen/records/gate_metrics.h).
const std::vector<std::string>& known_metrics() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& m : gate_metrics()) v.push_back(m.path);
    return v;
  }();
  return names;
}

std::string run_name(const RunSummary& r) { return r.info.strategy_name() + " @ " + format_run_rate(r.info); }


}  // namespace

void check_metric_name(const std::string& metric) {
  const auto& names = known_metrics();
  if (std::find(names.begin(), names.end(), metric) != names.end()) return;
  // An older name, or a configured percentile ("ttft_ms.p75").
  if (const GateMetric* m = find_gate_metric(metric); m && (m->alias == metric || m->path == metric)) return;
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown metric '" + metric + "' (expected one of: " + list +
                              ", or <latency>_ms.p<q> for a report.percentiles entry, e.g. ttft_ms.p75)");
}

MetricDirection metric_direction(const std::string& metric) {
  check_metric_name(metric);
  return find_gate_metric(metric)->higher_is_better ? MetricDirection::higher_is_better
                                                    : MetricDirection::lower_is_better;
}

std::string canonical_metric(const std::string& metric) {
  check_metric_name(metric);
  return find_gate_metric(metric)->path;
}

std::optional<double> run_metric(const RunSummary& run, const std::string& name) {
  const std::string metric = canonical_metric(name);
  if (metric == "n_failed") return static_cast<double>(run.metrics.n_failed);
  if (metric == "n_requests") return static_cast<double>(run.metrics.n_requests);
  const auto finite = [](double x) -> std::optional<double> {
    if (!std::isfinite(x)) return std::nullopt;
    return x;
  };
  if (metric.rfind("roofline.", 0) == 0) {
    if (!run.roofline) return std::nullopt;
    const RooflineEfficiency& e = *run.roofline;
    if (metric == "roofline.efficiency") return finite(e.overall.efficiency());
    if (metric == "roofline.prefill_efficiency") return finite(e.prefill.efficiency());
    if (metric == "roofline.decode_efficiency") return finite(e.decode.efficiency());
    if (metric == "roofline.mixed_efficiency") return finite(e.mixed.efficiency());
  }
  if (metric.rfind("accuracy.", 0) == 0) {
    if (!run.info.accuracy || !run.info.accuracy->measured()) return std::nullopt;
    const FormatAccuracy& a = *run.info.accuracy;
    if (metric == "accuracy.top1_agreement") return a.top1_agreement;
    if (metric == "accuracy.mean_kl") return a.mean_kl;
    if (metric == "accuracy.max_kl") return a.max_kl;
    if (metric == "accuracy.max_logit_error") return a.max_logit_error;
    if (metric == "accuracy.rel_logit_error") return a.rel_logit_error;
  }
  const nlohmann::ordered_json j = run.metrics;
  const nlohmann::ordered_json* node = &j;
  std::size_t start = 0;
  while (true) {
    const auto dot = metric.find('.', start);
    const std::string key = metric.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    auto it = node->find(key);
    if (it == node->end()) return std::nullopt;
    node = &*it;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (!node->is_number()) return std::nullopt;
  return node->get<double>();
}

std::string Gate::name() const {
  std::string s;
  if (min && max)
    s = format_plain(*min) + " <= " + metric + " <= " + format_plain(*max);
  else if (min)
    s = metric + " >= " + format_plain(*min);
  else if (max)
    s = metric + " <= " + format_plain(*max);
  else
    s = metric;
  if (strategy || rate) {
    s += " [";
    if (strategy) s += *strategy;
    if (strategy && rate) s += " ";
    if (rate) s += "@ " + format_rate(*rate) + " req/s";
    s += "]";
  }
  return s;
}

void Gate::validate() const {
  try {
    check_metric_name(metric);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("gate.metric: ") + e.what());
  }
  if (!min && !max) throw std::invalid_argument("gate " + metric + ": set min, max or both");
  if (min && !std::isfinite(*min)) throw std::invalid_argument("gate " + metric + ": min must be finite");
  if (max && !std::isfinite(*max)) throw std::invalid_argument("gate " + metric + ": max must be finite");
  if (min && max && *min > *max)
    throw std::invalid_argument("gate " + metric + ": min (" + format_plain(*min) + ") > max (" +
                                format_plain(*max) + ")");
  if (rate && !(*rate > 0.0))
    throw std::invalid_argument("gate " + metric + ": rate must be > 0 or inf (got " + format_plain(*rate) + ")");
}

void BaselineSpec::validate() const {
  if (path.empty()) throw std::invalid_argument("baseline.path must not be empty");
  if (!(max_regression_pct >= 0.0))
    throw std::invalid_argument("baseline.max_regression_pct must be >= 0 (got " +
                                format_plain(max_regression_pct) + ")");
  for (const auto& m : metrics) {
    try {
      check_metric_name(m);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("baseline.metrics: ") + e.what());
    }
  }
}

std::vector<GateResult> evaluate_gates(const Summary& summary, const std::vector<Gate>& gates) {
  std::vector<GateResult> out;
  for (const auto& g : gates) {
    GateResult res;
    res.name = g.name();
    res.passed = true;
    std::ostringstream msg;
    int n_matched = 0;
    for (const auto& run : summary.runs) {
      if (g.strategy && run.info.strategy_name() != *g.strategy) continue;
      if (g.rate && !same_rate(run.info.rate, *g.rate)) continue;
      ++n_matched;
      msg << (n_matched > 1 ? "; " : "") << run_name(run) << ": ";
      const auto v = run_metric(run, g.metric);
      if (run.metrics.n_requests == 0 || !v) {
        // Nothing measured is not a pass: a lost run would otherwise slip through CI.
        res.passed = res.passed && g.allow_missing;
        msg << (run.metrics.n_requests == 0 ? "no measured records" : "no value")
            << (g.allow_missing ? " (allowed)" : " FAIL");
        continue;
      }
      bool ok = true;
      if (g.min) ok = *v >= *g.min;
      if (ok && g.max) ok = *v <= *g.max;
      res.passed = res.passed && ok;
      msg << format_number(*v) << (ok ? " ok" : " FAIL");
    }
    if (n_matched == 0) {
      res.passed = false;
      res.message = "no run matches this gate's strategy/rate filter";
    } else {
      res.message = msg.str();
    }
    out.push_back(std::move(res));
  }
  return out;
}

std::vector<GateResult> evaluate_baseline(const Summary& current, const Summary& baseline,
                                          const BaselineSpec& spec) {
  const auto& metrics = spec.metrics.empty() ? default_compare_metrics() : spec.metrics;
  const Comparison c = compare_summaries(baseline, current, spec.max_regression_pct, metrics);
  std::vector<GateResult> out;
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    GateResult res;
    res.name = "baseline " + metrics[i] + " within " + format_plain(spec.max_regression_pct) + "%";
    res.passed = !c.runs.empty();
    std::ostringstream msg;
    for (const auto& r : c.runs) {
      const MetricDelta& d = r.deltas[i];
      res.passed = res.passed && !d.regression && (spec.allow_missing || !d.missing);
      msg << (&r == &c.runs.front() ? "" : "; ") << r.strategy << " @ " << r.rate_name << ": "
          << format_number(d.base) << " -> " << format_number(d.current) << " ("
          << format_change_pct(d.change_pct) << ")" << (d.regression ? " REGRESSION" : "")
          << (d.within_noise ? " within noise (95% intervals overlap)" : "")
          << (d.missing ? (spec.allow_missing ? " missing (allowed)" : " MISSING") : "");
    }
    for (const auto& lost : c.only_in_base) {
      res.passed = res.passed && spec.allow_missing;
      msg << "; " << lost << ": in the baseline, not in this run"
          << (spec.allow_missing ? " (allowed)" : " MISSING");
    }
    res.message =
        c.runs.empty() ? "no run matches the baseline " + spec.path + " by label and rate" : msg.str();
    out.push_back(std::move(res));
  }
  return out;
}

bool all_passed(const std::vector<GateResult>& results) {
  return std::all_of(results.begin(), results.end(), [](const GateResult& r) { return r.passed; });
}

std::string junit_xml(const std::vector<GateResult>& results, const std::string& suite_name) {
  const auto failures =
      std::count_if(results.begin(), results.end(), [](const GateResult& r) { return !r.passed; });
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x << "<testsuites name=\"servelab\" tests=\"" << results.size() << "\" failures=\"" << failures << "\">\n";
  x << "  <testsuite name=\"" << xml_escape(suite_name) << "\" tests=\"" << results.size() << "\" failures=\""
    << failures << "\" errors=\"0\" skipped=\"0\">\n";
  for (const auto& r : results) {
    x << "    <testcase classname=\"servelab.gates\" name=\"" << xml_escape(r.name) << "\"";
    if (r.passed) {
      x << ">\n      <system-out>" << xml_escape(r.message) << "</system-out>\n    </testcase>\n";
    } else {
      x << ">\n      <failure message=\"" << xml_escape(r.message) << "\" type=\"gate\">"
        << xml_escape(r.message) << "</failure>\n    </testcase>\n";
    }
  }
  x << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

void to_json(nlohmann::ordered_json& j, const Gate& g) {
  j = nlohmann::ordered_json::object();
  j["metric"] = g.metric;
  if (g.min) j["min"] = *g.min;
  if (g.max) j["max"] = *g.max;
  if (g.strategy) j["strategy"] = *g.strategy;
  if (g.rate) j["rate"] = number_keeping_inf(*g.rate);  // a `.inf` sweep point stays a filter
  if (g.allow_missing) j["allow_missing"] = true;
}

void from_json(const nlohmann::ordered_json& j, Gate& g) {
  g = Gate{};
  g.metric = j.at("metric").get<std::string>();
  if (j.contains("min") && !j["min"].is_null()) g.min = j["min"].get<double>();
  if (j.contains("max") && !j["max"].is_null()) g.max = j["max"].get<double>();
  if (j.contains("strategy") && !j["strategy"].is_null()) g.strategy = j["strategy"].get<std::string>();
  if (j.contains("rate") && !j["rate"].is_null()) g.rate = read_number_keeping_inf(j["rate"]);
  g.allow_missing = j.value("allow_missing", false);
  g.validate();
}

void to_json(nlohmann::ordered_json& j, const BaselineSpec& b) {
  j = {{"path", b.path}, {"max_regression_pct", number_keeping_inf(b.max_regression_pct)}, {"metrics", b.metrics}};
  if (b.allow_missing) j["allow_missing"] = true;
}

void from_json(const nlohmann::ordered_json& j, BaselineSpec& b) {
  b = BaselineSpec{};
  b.path = j.at("path").get<std::string>();
  if (j.contains("max_regression_pct") && !j["max_regression_pct"].is_null())
    b.max_regression_pct = read_number_keeping_inf(j["max_regression_pct"]);
  b.metrics = j.value("metrics", std::vector<std::string>{});
  b.allow_missing = j.value("allow_missing", false);
  b.validate();
}

}  // namespace servelab::analysis
