#pragma once
// Run-by-run comparison of two summaries (`servelab compare BASE NEW`, baseline gates): runs are
// matched by label and rate (a run imported from another tool's result, import_results.h, by its
// load alone: the same rate, concurrency or "max", and labelled "BASE-LABEL vs NEW-LABEL"); each
// metric's change is a percentage of the base value, and a regression is a change in the bad
// direction (latency up, throughput down) beyond a threshold.
// When both runs were repeated (workload.repeat) and the metric has 95% confidence intervals in
// both, a regression must also clear the noise: it is flagged only when the intervals do not
// overlap; a change beyond the threshold whose intervals overlap is reported as within noise.
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "analysis/summary.h"

namespace servelab::analysis {

/// p50/p99 TTFT and TPOT, output throughput, goodput, SLO attainment.
const std::vector<std::string>& default_compare_metrics();

/// One metric of one matched run.
struct MetricDelta {
  std::string metric;
  double base = 0.0;        ///< NaN when the base run has no value
  double current = 0.0;     ///< NaN when the new run has no value
  double change_pct = 0.0;  ///< (current − base) / |base| × 100; ±inf when base is 0; NaN if unknown
  bool regression = false;  ///< worse by more than the threshold (and, with intervals, beyond the noise)
  bool missing = false;     ///< the base run has a value, the new run none (null)
  bool intervals = false;   ///< both runs have a 95% interval for this metric
  double base_lo = 0.0, base_hi = 0.0;        ///< the base run's 95% interval (NaN without one)
  double current_lo = 0.0, current_hi = 0.0;  ///< the new run's
  bool within_noise = false;  ///< worse by more than the threshold, but the intervals overlap
};

/// One run present in both summaries.
struct RunComparison {
  std::string label;
  std::string strategy;
  double rate = 0.0;
  std::string rate_name;  ///< format_run_rate: "4", "max", "c8", "trace"
  std::vector<MetricDelta> deltas;
};

/// One strategy's roofline efficiency in each summary: its runs pooled (Σ roofline / Σ measured
/// step time over all its rates). Informational: no gate reads it.
struct StrategyRoofline {
  std::string strategy;
  std::string base_backend, current_backend;  ///< "sim" runs say so instead of a figure
  std::optional<RooflineEfficiency> base, current;
};

/// The comparison of two summaries.
struct Comparison {
  double threshold_pct = 10.0;
  std::vector<RunComparison> runs;        ///< in the new summary's order
  std::vector<std::string> only_in_base;  ///< labels (with rate) that the new summary lacks
  std::vector<std::string> only_in_new;
  /// One row per strategy of either summary (new's order, then base-only ones); empty when no run
  /// of either has a roofline.
  std::vector<StrategyRoofline> roofline;
  /// When false (default), a base run missing from the new summary or a metric that became null
  /// fails the comparison like a regression; when true they are only listed.
  bool allow_missing = false;

  bool has_regression() const;
  /// Some compared metric had intervals on both sides (repeated runs).
  bool used_intervals() const;
  /// A base run missing from the new summary, or a MetricDelta::missing.
  bool has_missing() const;
  /// 1 on a regression beyond the threshold, or on has_missing() unless allow_missing; else 0
  /// (servelab compare's exit code).
  int exit_code() const { return has_regression() || (has_missing() && !allow_missing) ? 1 : 0; }
};

/// Compares `current` with `base`. Throws std::invalid_argument on an unknown metric name or a
/// negative threshold.
Comparison compare_summaries(const Summary& base, const Summary& current, double threshold_pct,
                             const std::vector<std::string>& metrics = default_compare_metrics(),
                             bool allow_missing = false);

/// A readable table: per run, each metric's base, new (with 95% intervals when repeated) and signed
/// % change, "REGRESSION", "within noise" and "MISSING" marks, then unmatched runs and a verdict
/// saying whether intervals were used; then the roofline efficiency, one row per strategy.
void print_comparison(std::ostream& out, const Comparison& c);

}  // namespace servelab::analysis
