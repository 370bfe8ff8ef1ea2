#pragma once
// Everything a run folder holds besides the raw records, and how it is (re-)made:
//
//   DIR/records.jsonl  RequestRecords (written by the driver as requests finish)
//   DIR/steps.jsonl    StepRecords (in-process runs; optional)
//   DIR/server_metrics.jsonl  the target's /metrics during HTTP runs (optional; server_state.h)
//   DIR/schemas.jsonl  workload.structured_output's schemas, one a line (optional; structured_stats.h)
//   DIR/runs.json      ReportInput less the records: scenario, environment, SLO, RunInfo per label,
//                      gates, baseline — what `servelab report DIR` needs besides the records
//   DIR/summary.json   results contract (summary.h), byte-identical when re-rendered
//   DIR/report.md, results.csv, junit.xml, report.html, plots/*.svg|png|dat|gp
//
// write_reports() is what `servelab run` calls at the end of a run; render_reports() is
// `servelab report DIR`: load_report_input() + write_reports(), so both paths share every line.
#include <cmath>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "analysis/gates.h"
#include "analysis/plots.h"
#include "analysis/server_state.h"
#include "analysis/summary.h"
#include "loadgen/records/record.h"
#include "loadgen/records/step_record.h"

namespace servelab::analysis {

inline constexpr const char* kRunsSchema = "servelab.runs/1";

/// What the reports are made from.
struct ReportInput {
  ScenarioInfo scenario;
  Environment environment;  ///< measured at run time; re-renders keep it (date included)
  SloSpec slo;
  MetricsOptions options;     ///< report.percentiles and report.window
  double cdf_rate = NAN;      ///< report.cdf_rate: the rate of the latency-CDF plots; NaN = the highest common rate
  std::vector<RunInfo> runs;  ///< one per label, in sweep order
  std::vector<Gate> gates;
  std::optional<BaselineSpec> baseline;  ///< path resolved against the current directory
  /// HTTP runs (target.max_error_rate): a run whose failed share passes this, or whose every
  /// request failed, fails as a gate naming the reasons. runs.json: "max_error_rate".
  std::optional<double> max_error_rate;
  std::vector<RequestRecord> records;
  std::vector<StepRecord> steps;
  /// HTTP runs: the target's /metrics scraped during the run (DIR/server_metrics.jsonl), drawn
  /// under the client's latencies (plots server_state_<strategy>).
  std::vector<ServerSample> server_samples;
  /// Runs imported from other tools' result files (import_results.h): reported after the
  /// measured runs, with only the figures their tools gave. runs.json: "imported".
  std::vector<RunSummary> imported;
  /// Structured output: the schemas of DIR/schemas.jsonl (a record's "schema" indexes them),
  /// against which each constrained output is validated.
  std::vector<std::string> schemas;
  /// records.jsonl or steps.jsonl ended in a partial line (dropped): the run was killed mid-write.
  /// Reports then say "run cut short" first among their warnings, as they do when a run has fewer
  /// records than it planned.
  bool cut_short = false;
};

struct ReportOptions {
  bool plots = true;  ///< false: skip gnuplot (report.html then has no figures)
  PlotOptions plot;   ///< plot.cdf_rate comes from runs.json ("report.cdf_rate") when not set here
};

/// What write_reports made and found.
struct ReportOutcome {
  Summary summary;
  std::vector<GateResult> gates;      ///< absolute gates, then baseline gates
  std::vector<std::string> warnings;  ///< lateness, failures, missing records, plotting problems
  std::vector<PlotFile> plots;
  bool passed() const { return all_passed(gates); }
  int exit_code() const { return passed() ? 0 : 1; }
};

/// Writes runs.json, summary.json, results.csv, junit.xml, plots/, report.md and report.html
/// into `dir` (created if missing); leaves records.jsonl and steps.jsonl alone. Throws
/// std::invalid_argument on bad input (RunInfo, SLO, gates, records) and std::runtime_error
/// when a file cannot be written; an unreadable baseline becomes a failing gate instead.
ReportOutcome write_reports(const std::string& dir, const ReportInput& input,
                            const ReportOptions& options = {});

/// Writes only DIR/runs.json (the lead may write it at the start of a run, so a run that dies
/// half-way can still be reported from the records it left).
void write_runs_file(const std::string& dir, const ReportInput& input);

/// Reads DIR/runs.json, DIR/records.jsonl, DIR/steps.jsonl and DIR/server_metrics.jsonl (when present). Throws
/// std::runtime_error("file[:line]: message") on a missing or malformed file.
ReportInput load_report_input(const std::string& dir);

/// `servelab report DIR`: load_report_input(dir) then write_reports(dir, ...).
ReportOutcome render_reports(const std::string& dir, const ReportOptions& options = {});

// Renderers (report_*.cpp), each a pure function of its inputs.

/// report.md: header (scenario, environment, SLO), runs table, KV table, gates, warnings, plots.
std::string report_markdown(const Summary& s, const std::vector<GateResult>& gates,
                            const std::vector<std::string>& warnings, const std::vector<PlotFile>& plots);
/// results.csv: a header line and one row per run; numbers unrounded beyond summary.json's 6 decimals.
std::string results_csv(const Summary& s);
/// report.html: one self-contained file (inline CSS, tables, the SVG figures read from `dir` and
/// inlined without their XML prolog); no external URLs.
std::string report_html(const std::string& dir, const Summary& s, const std::vector<GateResult>& gates,
                        const std::vector<std::string>& warnings, const std::vector<PlotFile>& plots);

/// The console table: one aligned row per strategy × rate (the same columns as report.md).
void print_console_summary(std::ostream& out, const Summary& s);
/// A terminal chart of a metric (default p50 TTFT) vs request rate, one letter per strategy,
/// with axis labels and a legend; `height` rows by `width` columns of plot area.
void print_terminal_plot(std::ostream& out, const Summary& s, const std::string& metric = "ttft_ms.p50",
                         int width = 56, int height = 12);
/// Gate verdicts, one line each, then "gates: N passed, M failed".
void print_gate_results(std::ostream& out, const std::vector<GateResult>& gates);
/// Warnings from metrics: lateness p99 > 1 ms, failed requests, fewer records than planned.
std::vector<std::string> summary_warnings(const Summary& s);

/// Why a run's measured requests failed, most frequent first: {reason, count}. Reasons are the
/// records' error texts with request-specific numbers kept (HTTP status, seconds).
std::vector<std::pair<std::string, std::size_t>> failure_reasons(const std::string& run,
                                                                  const std::vector<RequestRecord>& records);

/// "5 × connect: Connection refused; 2 × HTTP 429: queue full" (at most `max_reasons`, then "...").
std::string format_failure_reasons(const std::vector<std::pair<std::string, std::size_t>>& reasons,
                                   std::size_t max_reasons = 3);

/// One gate per run: failed share <= max_error_rate, and not every request failed.
std::vector<GateResult> error_rate_gates(const Summary& s, const std::vector<RequestRecord>& records,
                                         double max_error_rate);

}  // namespace servelab::analysis
