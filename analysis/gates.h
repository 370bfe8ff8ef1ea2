#pragma once
// CI gates over a summary: absolute bounds on a metric ("ttft_ms.p99 <= 500 for continuous-paged")
// and a comparison with a baseline summary.json (fail when a key metric regresses by more than
// N %). Results go to junit.xml (one testcase per gate) and report.md; `servelab run` and
// `servelab report` exit 1 when any gate fails.
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/summary.h"

namespace servelab::analysis {

/// Whether a larger value of a metric is worse (latencies, failures) or better (throughputs,
/// goodput, attainment, KV utilization).
enum class MetricDirection { lower_is_better, higher_is_better };

/// Metric names gates and compare accept: the summary paths of loadgen/records/gate_metrics.h,
/// a path into a run's "metrics" object with '.' between levels ("ttft_ms.p99", "goodput_tok_s"
/// — or its older name "goodput" —,
/// "kv_utilization.mean", "kv_breakdown.free"), or a run-level count ("n_failed", "n_requests").
/// Throws std::invalid_argument listing the valid names.
void check_metric_name(const std::string& metric);
/// The summary path of a valid metric name: an older unit-less name ("goodput") becomes its
/// unit-named path ("goodput_tok_s").
std::string canonical_metric(const std::string& metric);
/// Direction of a valid metric name.
MetricDirection metric_direction(const std::string& metric);
/// The metric's value in one run; nullopt when the run has no value (null: no samples).
std::optional<double> run_metric(const RunSummary& run, const std::string& metric);

/// An absolute bound on one metric, over every run matching the optional filters.
struct Gate {
  std::string metric;                   ///< see check_metric_name
  std::optional<double> min;            ///< pass when value >= min
  std::optional<double> max;            ///< pass when value <= max
  std::optional<std::string> strategy;  ///< only runs of this strategy (RunInfo::strategy_name)
  std::optional<double> rate;           ///< only runs at this rate (req/s); +inf = the max run (JSON "inf")
  /// false (default): a matched run with no measured records, or with no value for the metric,
  /// fails the gate. true: such runs are skipped (noted in the message), e.g. for a metric that
  /// is legitimately null in some runs.
  bool allow_missing = false;

  /// e.g. "ttft_ms.p99 <= 500 [continuous-paged @ 4 req/s]".
  std::string name() const;
  /// Throws std::invalid_argument naming the field: a known metric, at least one of min/max,
  /// min <= max, rate > 0.
  void validate() const;
};

/// Compare with a baseline summary: fail when a metric regresses by more than max_regression_pct
/// (latency up, throughput down) in any run matched by label and rate — and, when both runs were
/// repeated, only when their 95% intervals do not overlap (compare.h).
struct BaselineSpec {
  std::string path;  ///< summary.json or a run folder holding one
  double max_regression_pct = 10.0;
  std::vector<std::string> metrics;  ///< empty = default_compare_metrics()
  /// false (default): a baseline run missing from the current summary, or a metric with a
  /// baseline value that became null, fails the gate. true: they are only reported.
  bool allow_missing = false;

  void validate() const;  ///< path non-empty, max_regression_pct >= 0, metrics known
};

/// One gate's verdict.
struct GateResult {
  std::string name;
  bool passed = false;
  std::string message;  ///< per-run values and bounds; why it failed
};

/// Evaluates each gate over the matching runs. A gate fails when any matching run violates it,
/// measured no records or has no value for the metric (unless Gate::allow_missing), or when no
/// run matches (a filter that matches nothing is a configuration mistake, not a pass).
std::vector<GateResult> evaluate_gates(const Summary& summary, const std::vector<Gate>& gates);

/// One GateResult per baseline metric ("baseline ttft_ms.p99 within 10%"); fails when no run
/// matches, on a regression, and (unless spec.allow_missing) when a baseline run is missing from
/// `current` or the metric has a baseline value but none now.
std::vector<GateResult> evaluate_baseline(const Summary& current, const Summary& baseline,
                                          const BaselineSpec& spec);

/// True when every result passed (also when there are none).
bool all_passed(const std::vector<GateResult>& results);

/// JUnit XML: one <testsuite name=suite_name> with a <testcase> per result, failing ones holding
/// a <failure message="..."> element. Text is XML-escaped.
std::string junit_xml(const std::vector<GateResult>& results, const std::string& suite_name);

void to_json(nlohmann::ordered_json& j, const Gate& g);
void from_json(const nlohmann::ordered_json& j, Gate& g);  ///< validates
void to_json(nlohmann::ordered_json& j, const BaselineSpec& b);
void from_json(const nlohmann::ordered_json& j, BaselineSpec& b);  ///< validates

}  // namespace servelab::analysis
