#include "analysis/compare.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include "analysis/gates.h"
#include "analysis/import_results.h"
#include "analysis/text_format.h"

namespace servelab::analysis {
namespace {


/// The same offered load: the same mode and rate (open) or concurrency (closed).
bool same_load(const RunInfo& a, const RunInfo& b) {
  if (a.mode != b.mode) return false;
  if (a.mode == RunMode::open) return same_rate(a.rate, b.rate);
  if (a.mode == RunMode::closed) return a.concurrency == b.concurrency;
  return a.mode == RunMode::max;
}

std::string run_key(const RunSummary& r) { return r.info.label + " @ " + format_run_rate(r.info); }

MetricDelta delta_of(const RunSummary& base, const RunSummary& cur, const std::string& metric,
                     double threshold_pct) {
  MetricDelta d;
  d.metric = metric;
  d.base = run_metric(base, metric).value_or(kNaN);
  d.current = run_metric(cur, metric).value_or(kNaN);
  const std::string path = canonical_metric(metric);
  const MetricStats* bs = base.stat(path);
  const MetricStats* cs = cur.stat(path);
  d.base_lo = bs ? bs->ci95_lo : kNaN;
  d.base_hi = bs ? bs->ci95_hi : kNaN;
  d.current_lo = cs ? cs->ci95_lo : kNaN;
  d.current_hi = cs ? cs->ci95_hi : kNaN;
  d.intervals = std::isfinite(d.base_lo) && std::isfinite(d.base_hi) && std::isfinite(d.current_lo) &&
                std::isfinite(d.current_hi);
  if (std::isnan(d.base) || std::isnan(d.current)) {
    d.change_pct = kNaN;
    d.missing = !std::isnan(d.base);  // had a value, lost it: the new run measured less
    return d;
  }
  if (d.base == 0.0) {
    d.change_pct = d.current == 0.0 ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), d.current);
  } else {
    d.change_pct = (d.current - d.base) / std::fabs(d.base) * 100.0;
  }
  const double worse_pct =
      metric_direction(metric) == MetricDirection::lower_is_better ? d.change_pct : -d.change_pct;
  const bool beyond = worse_pct > threshold_pct;
  const bool overlap = d.intervals && d.base_lo <= d.current_hi && d.current_lo <= d.base_hi;
  d.regression = beyond && !overlap;
  d.within_noise = beyond && overlap;
  return d;
}

/// A strategy's runs pooled; its backend ("" when it has no run in `s`).
std::optional<RooflineEfficiency> strategy_roofline(const Summary& s, const std::string& strategy, std::string& backend) {
  std::optional<RooflineEfficiency> pooled;
  for (const auto& r : s.runs) {
    if (r.info.strategy_name() != strategy) continue;
    backend = r.info.backend;
    if (!r.roofline) continue;
    if (pooled) pooled->merge(*r.roofline);
    else pooled = r.roofline;
  }
  return pooled;
}

std::vector<StrategyRoofline> roofline_rows(const Summary& base, const Summary& current) {
  std::vector<StrategyRoofline> rows;
  bool any = false;
  std::vector<std::string> names = current.strategies();
  for (const auto& n : base.strategies())
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  for (const auto& n : names) {
    StrategyRoofline row;
    row.strategy = n;
    row.base = strategy_roofline(base, n, row.base_backend);
    row.current = strategy_roofline(current, n, row.current_backend);
    any = any || row.base || row.current;
    rows.push_back(std::move(row));
  }
  if (!any) rows.clear();
  return rows;
}

}  // namespace

const std::vector<std::string>& default_compare_metrics() {
  static const std::vector<std::string> metrics = {"ttft_ms.p50", "ttft_ms.p99", "tpot_ms.p50", "tpot_ms.p99",
                                                   "output_throughput_tok_s", "goodput_tok_s", "slo_attainment"};
  return metrics;
}

bool Comparison::has_missing() const {
  if (!only_in_base.empty()) return true;
  for (const auto& r : runs)
    for (const auto& d : r.deltas)
      if (d.missing) return true;
  return false;
}

bool Comparison::used_intervals() const {
  for (const auto& r : runs)
    for (const auto& d : r.deltas)
      if (d.intervals) return true;
  return false;
}

bool Comparison::has_regression() const {
  for (const auto& r : runs)
    for (const auto& d : r.deltas)
      if (d.regression) return true;
  return false;
}

Comparison compare_summaries(const Summary& base, const Summary& current, double threshold_pct,
                             const std::vector<std::string>& metrics, bool allow_missing) {
  if (!(threshold_pct >= 0.0))
    throw std::invalid_argument("threshold must be >= 0 % (got " + std::to_string(threshold_pct) + ")");
  for (const auto& m : metrics) check_metric_name(m);
  Comparison c;
  c.threshold_pct = threshold_pct;
  c.allow_missing = allow_missing;
  std::vector<bool> base_matched(base.runs.size(), false);
  for (const auto& cur : current.runs) {
    const RunSummary* match = nullptr;
    for (std::size_t i = 0; i < base.runs.size(); ++i) {
      const auto& b = base.runs[i];
      if (!base_matched[i] && b.info.label == cur.info.label && same_rate(b.info.rate, cur.info.rate)) {
        match = &b;
        base_matched[i] = true;
        break;
      }
    }
    // Another tool's run (imported) has its tool's label: it pairs with a run at the same load.
    for (std::size_t i = 0; !match && i < base.runs.size(); ++i) {
      const auto& b = base.runs[i];
      if (!base_matched[i] && (is_imported(b) || is_imported(cur)) && same_load(b.info, cur.info)) {
        match = &b;
        base_matched[i] = true;
      }
    }
    if (!match) {
      c.only_in_new.push_back(run_key(cur));
      continue;
    }
    RunComparison rc;
    rc.label = match->info.label == cur.info.label ? cur.info.label : match->info.label + " vs " + cur.info.label;
    rc.strategy = cur.info.strategy_name();
    rc.rate = cur.info.rate;
    rc.rate_name = format_run_rate(cur.info);
    for (const auto& m : metrics) rc.deltas.push_back(delta_of(*match, cur, m, threshold_pct));
    c.runs.push_back(std::move(rc));
  }
  for (std::size_t i = 0; i < base.runs.size(); ++i)
    if (!base_matched[i]) c.only_in_base.push_back(run_key(base.runs[i]));
  c.roofline = roofline_rows(base, current);
  return c;
}

namespace {

std::string with_interval(double v, double lo, double hi) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return format_number(v);
  return format_number(v) + " [" + format_number(lo) + ", " + format_number(hi) + "]";
}

}  // namespace

void print_comparison(std::ostream& out, const Comparison& c) {
  TextTable t({"run", "rate", "metric", "base [95% CI]", "new [95% CI]", "change", ""});
  std::size_t n_noise = 0;
  for (const auto& r : c.runs) {
    bool first = true;
    for (const auto& d : r.deltas) {
      t.add_row({first ? r.label : "", first ? r.rate_name : "", d.metric, with_interval(d.base, d.base_lo, d.base_hi),
                 with_interval(d.current, d.current_lo, d.current_hi), format_change_pct(d.change_pct),
                 d.regression ? "REGRESSION" : d.missing ? "MISSING" : d.within_noise ? "within noise" : ""});
      first = false;
      n_noise += d.within_noise ? 1 : 0;
    }
  }
  t.print(out);
  for (const auto& k : c.only_in_base) out << "only in base: " << k << " (MISSING from new)\n";
  for (const auto& k : c.only_in_new) out << "only in new:  " << k << "\n";
  std::size_t n_reg = 0, n_null = 0;
  for (const auto& r : c.runs)
    for (const auto& d : r.deltas) {
      n_reg += d.regression ? 1 : 0;
      n_null += d.missing ? 1 : 0;
    }
  out << (c.exit_code() ? "FAIL: " : "ok: ") << n_reg << " regression(s) beyond "
      << format_plain(c.threshold_pct) << "% over " << c.runs.size() << " matched run(s)";
  if (c.used_intervals())
    out << "; with repeated runs a regression must exceed the threshold AND its 95% confidence intervals must not "
           "overlap ("
        << n_noise << " change(s) beyond the threshold were within noise)";
  else
    out << "; no confidence intervals (runs not repeated: workload.repeat), threshold only";
  if (c.has_missing())
    out << "; " << c.only_in_base.size() << " base run(s) missing from new, " << n_null
        << " metric(s) became null" << (c.allow_missing ? " (allowed by --allow-missing)" : "");
  out << "\n";
  if (c.roofline.empty()) return;
  out << "\nroofline efficiency by strategy (sum of step rooflines over sum of measured step times, all its runs):\n";
  TextTable rt({"strategy", "base", "new", "change", "new prefill", "new decode", "new mixed", "host pauses (s) base / new",
                "new ceilings"});
  for (const auto& r : c.roofline) {
    const double b = r.base ? r.base->overall.efficiency() : kNaN;
    const double n = r.current ? r.current->overall.efficiency() : kNaN;
    const double change = std::isfinite(b) && std::isfinite(n) && b != 0.0 ? (n - b) / b * 100.0 : kNaN;
    auto cls = [&](StepClass k) {
      return r.current && r.current->of(k).n_steps > 0 ? format_number(r.current->of(k).efficiency()) : std::string("-");
    };
    auto pauses = [](const std::optional<RooflineEfficiency>& e) {
      return e ? format_host_pauses(e->host_pauses) : std::string("-");
    };
    rt.add_row({r.strategy, format_efficiency(r.base, r.base_backend), format_efficiency(r.current, r.current_backend),
                format_change_pct(change), cls(StepClass::prefill), cls(StepClass::decode), cls(StepClass::mixed),
                pauses(r.base) + " / " + pauses(r.current),
                r.current && r.current->ceilings ? format_ceilings(*r.current->ceilings) : std::string("-")});
  }
  rt.print(out);
}

}  // namespace servelab::analysis
