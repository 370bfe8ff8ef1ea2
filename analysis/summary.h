#pragma once
// summary.json: the results contract of DESIGN.md. Built from records.jsonl + steps.jsonl grouped
// by their "run" label, with the RunInfo of each label; written deterministically (fixed key
// order, computed figures rounded to 6 decimals, inputs such as rates and SLOs written exactly,
// 2-space indent, trailing newline) so `servelab report DIR` reproduces it byte for byte.
//
//   {"schema": "servelab.summary/1",
//    "scenario": {"name", "file", "seed", ...details},
//    "environment": {"device", "cpu_model", "n_cores", "commit", "date", "servelab_version"},
//    "slo": {"ttft_ms", "tpot_ms", "attainment", "itl_ms", "e2e_ms", "percentiles"},
//    "runs": [{"label", "batching", "kv", "backend", "rate", "n_requests", "n_failed",
//              "strategy", "mode", ["concurrency",] "n_planned", "config": {...},
//              "metrics": {... see metrics.h ...}, ["structured_output": {... structured_stats.h ...},]
//              ["roofline": {... roofline_efficiency.h ...},]
//              ["accuracy": {... format_accuracy.h ...},]
//              ["repeats": {"n", "seeds", "labels", "stats": {path: MetricStats}, "runs": [metrics]}]}],
//    "report": {"percentiles", "window": {..., "description"}}}   (what every run's metrics used)
//   "rate" is a number only for mode "open"; "max", "closed", "trace" and "unknown" runs write
//   null and `mode` says which (a summary without "mode" is read by its label: "@c<N>" closed,
//   "@trace" trace, else a null rate is "max").
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/environment.h"
#include "analysis/metrics.h"
#include "analysis/repeats.h"
#include "analysis/format_accuracy.h"
#include "analysis/lora_loads.h"
#include "analysis/roofline_efficiency.h"
#include "analysis/structured_stats.h"
#include "loadgen/records/record.h"
#include "loadgen/records/step_record.h"

namespace servelab::analysis {

inline constexpr const char* kSummarySchema = "servelab.summary/1";

/// What kind of load a run offered. JSON: "open", "max", "closed", "trace", "unknown".
enum class RunMode {
  open,     ///< open loop at a finite `rate` (req/s)
  max,      ///< open loop with an infinite rate: every request at t = 0 (`rate` +inf, JSON null)
  closed,   ///< closed loop with `concurrency` requests in flight (no rate: NaN, JSON null)
  trace,    ///< replayed trace times (no rate: NaN, JSON null)
  unknown,  ///< records of a label no RunInfo names (no rate: NaN, JSON null)
};
const char* to_string(RunMode m);
RunMode parse_run_mode(const std::string& s);  ///< throws std::invalid_argument listing the names

/// What one run (one strategy × rate) was: the label its records carry and how it was configured.
struct RunInfo {
  std::string label;     ///< the records' "run" field, e.g. "continuous-paged@4"
  std::string strategy;  ///< row/line name in reports; "" means "<batching>-<kv>"
  std::string batching;  ///< static | dynamic | continuous ("" when unknown, e.g. a foreign server)
  std::string kv;        ///< naive | paged ("" when unknown)
  std::string backend;   ///< cpu | cuda | sim | http
  RunMode mode = RunMode::open;
  double rate = 0.0;     ///< requests/s offered (mode open); +inf for max; NaN without a rate (JSON null)
  int concurrency = 0;   ///< requests in flight (mode closed), else 0
  int n_requests = 0;    ///< planned measured requests (warm-up excluded); 0 = not known; <= kMaxRequestsPerRun
  /// Repetitions of this point (workload.repeat); > 1: records carry repetition_label(label, k, n).
  int repeats = 1;
  std::vector<uint64_t> seeds;  ///< the plan seed of each repetition (empty: not recorded)
  nlohmann::ordered_json config = nlohmann::ordered_json::object();  ///< free: the strategy's knobs
  /// Real in-process runs: the device ceilings its steps' rooflines were priced at (runs.json
  /// "roofline_ceilings"; loadgen/roofline_meter.h). Unset on the sim, over HTTP, or when unknown.
  std::optional<RooflineCeilings> roofline_ceilings;
  /// In-process runs of a strategy with quantized weights or an FP8 KV cache: what its formats
  /// cost in accuracy on the run's backend (format_accuracy.h; runs.json and summary.json
  /// "accuracy"). Unset for the model's own formats or when the run did not measure it.
  std::optional<FormatAccuracy> accuracy;

  /// The strategy name reports group by.
  std::string strategy_name() const;
  /// Throws std::invalid_argument naming the field: label non-empty; batching in {static,
  /// dynamic, continuous} or ""; kv in {naive, paged} or ""; rate finite > 0 for mode open, +inf
  /// for max, NaN for closed/trace; concurrency >= 1 for closed; n_requests in [0, kMaxRequestsPerRun].
  void validate() const;
};

/// A run's rate for tables and messages: "4" (open), "max", "c8" (closed, concurrency 8),
/// "trace", "?" (unknown).
std::string format_run_rate(const RunInfo& r);

/// Which scenario produced the runs. `details` holds free JSON merged after the fixed keys.
struct ScenarioInfo {
  std::string name;
  std::string file;
  uint64_t seed = 0;
  nlohmann::ordered_json details = nlohmann::ordered_json::object();
};

/// One run's configuration and metrics. With repetitions, `metrics` is their mean
/// (mean_metrics) and `stats` holds each headline metric's statistics over them.
struct RunSummary {
  RunInfo info;
  RunMetrics metrics;
  std::vector<RunMetrics> repetitions;  ///< each repetition's own metrics (empty when repeats is 1)
  std::vector<std::pair<std::string, MetricStats>> stats;  ///< by summary path; empty when repeats is 1
  /// Multi-LoRA runs (records naming adapters): each adapter's metrics over its own requests, by
  /// name ("" = the base model's requests), sorted; empty when no record names one. JSON: "lora".
  std::vector<std::pair<std::string, RunMetrics>> by_lora;
  /// Multi-LoRA runs whose steps loaded adapters into slots: those loads and steps
  /// (lora_loads.h); JSON "lora_loads" after "lora", absent without any.
  std::optional<LoraLoads> lora_loads;
  /// Runs with structured-output requests: validity and cost (structured_stats.h); JSON
  /// "structured_output" after "metrics", absent otherwise.
  std::optional<StructuredStats> structured;
  /// Real in-process runs: Σ roofline / Σ measured step time, overall and per step class
  /// (roofline_efficiency.h); JSON "roofline" after "metrics", absent when the steps carry none.
  std::optional<RooflineEfficiency> roofline;

  /// The statistics of `metric` (a summary path) over the repetitions, or nullptr.
  const MetricStats* stat(const std::string& metric) const;
};

/// The whole summary.json in memory.
struct Summary {
  ScenarioInfo scenario;
  Environment environment;
  SloSpec slo;
  MetricsOptions options;  ///< extra percentiles and the measurement window every run used
  std::vector<RunSummary> runs;

  /// Strategy names in first-appearance order.
  std::vector<std::string> strategies() const;
};

/// Computes every run's metrics. Runs come in the order of `infos`; records or steps whose label
/// has no RunInfo still get a run (label only, sorted by label, after the others) so nothing
/// measured is silently dropped. Throws std::invalid_argument on a bad RunInfo, SLO or record.
/// A RunInfo with repeats > 1 gets one RunMetrics per repetition whose label has records (all of
/// them when none has), their mean and statistics.
Summary build_summary(const ScenarioInfo& scenario, const Environment& environment, const SloSpec& slo,
                      const std::vector<RunInfo>& infos, const std::vector<RequestRecord>& records,
                      const std::vector<StepRecord>& steps, const MetricsOptions& options = {});

void to_json(nlohmann::ordered_json& j, const RunInfo& r);  ///< without "n_failed"/"metrics"
void from_json(const nlohmann::ordered_json& j, RunInfo& r);
void to_json(nlohmann::ordered_json& j, const ScenarioInfo& s);
void from_json(const nlohmann::ordered_json& j, ScenarioInfo& s);
/// {"ttft_ms", "tpot_ms", "attainment", "itl_ms", "e2e_ms" (null: no bound), "percentiles":
/// [{metric, percentile, max_ms}]}; an older summary's ttft/tpot-only form reads as before.
void to_json(nlohmann::ordered_json& j, const SloSpec& s);
void from_json(const nlohmann::ordered_json& j, SloSpec& s);
/// {"percentiles": [...], "window": {"skip_first_s", "skip_last_s", "skip_first_requests",
/// "skip_last_requests", "description"}}.
void to_json(nlohmann::ordered_json& j, const MetricsOptions& o);
void from_json(const nlohmann::ordered_json& j, MetricsOptions& o);
void to_json(nlohmann::ordered_json& j, const RunSummary& r);
void from_json(const nlohmann::ordered_json& j, RunSummary& r);
void to_json(nlohmann::ordered_json& j, const Summary& s);
/// Throws std::invalid_argument when "schema" is not servelab.summary/1 or a key is malformed.
void from_json(const nlohmann::ordered_json& j, Summary& s);

/// The exact bytes of summary.json.
std::string summary_text(const Summary& s);
/// Writes summary_text to `path`; throws std::runtime_error("path: cannot write").
void write_summary(const std::string& path, const Summary& s);
/// Reads a summary.json; throws std::runtime_error("path: message") on a missing or bad file.
Summary read_summary(const std::string& path);
/// Reads `path` as a summary.json file, or `path`/summary.json when `path` is a directory.
Summary read_summary_or_dir(const std::string& path);

/// Writes `text` to `path` (creating parent folders); throws std::runtime_error("path: ...").
void write_text_file(const std::string& path, const std::string& text);
/// Reads a whole file; throws std::runtime_error("path: cannot open").
std::string read_text_file(const std::string& path);

}  // namespace servelab::analysis
