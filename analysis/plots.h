#pragma once
// Plots with gnuplot, run as a subprocess on a generated script (DIR/plots/plots.gp) and data
// files (DIR/plots/*.dat), so every figure can be re-drawn or restyled by hand:
//   ttft_vs_rate   p50 (solid) and p99 (dashed) TTFT vs request rate, a line per strategy, SLO line
//   tpot_vs_rate   the same for TPOT
//   throughput_vs_rate  output throughput (solid) and goodput (dashed) vs rate
//   kv_breakdown   the KV arena's mean shares per strategy at its highest rate, stacked bars
//   timeline_<strategy>  batch size and KV arena use over time in the strategy's highest-rate run
//   cdf_{ttft,tpot,itl,e2e}  the latency's CDF, a line per strategy, at one rate (PlotOptions::cdf_rate)
//   ttft_queue_<strategy>  each request's TTFT at its arrival time and the queue length (arrived, not
//                  yet admitted) over time, in the strategy's highest-rate run (repetition 1)
//   server_state_<strategy>  above: the client's TTFT at arrival and requests waiting for a first
//                  token; below: the server's running and waiting requests, KV use and preemptions
//                  (server_metrics.jsonl for HTTP runs, steps.jsonl in-process), one time axis
//   goodput_vs_rate  goodput (tokens/s; 95% intervals with repeats) vs rate, each strategy's
//                  capacity (highest rate meeting the SLO: attainment target and percentile objectives) marked
// Each as .svg, and .png (pngcairo, else png) when gnuplot has a PNG terminal. Without gnuplot
// the plots are skipped with a warning: a report never fails for want of a plotter.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "analysis/server_state.h"
#include "analysis/summary.h"
#include "loadgen/records/record.h"
#include "loadgen/records/step_record.h"

namespace servelab::analysis {

struct PlotOptions {
  std::string gnuplot = "gnuplot";  ///< executable name (searched in PATH) or path
  /// Rate (req/s) of the latency CDFs; NaN = the highest rate every strategy ran (else each
  /// strategy's highest-rate run).
  double cdf_rate = NAN;
};

/// One figure written under DIR/plots/.
struct PlotFile {
  std::string title;
  std::string svg;  ///< path relative to DIR, e.g. "plots/ttft_vs_rate.svg"
  std::string png;  ///< "" when no PNG was written
};

struct PlotResult {
  std::vector<PlotFile> files;        ///< only figures whose SVG exists
  std::vector<std::string> warnings;  ///< gnuplot missing or failing, figures skipped
};

/// True when `gnuplot` names an executable (a path, or a name found in PATH).
bool gnuplot_available(const std::string& gnuplot = "gnuplot");

/// Whether a latency-vs-rate figure gets a log y axis: when the SLO line sits far above the data
/// (over 5x its largest p99), or when the runs' p50s span over 100x (static batching's queueing
/// beside continuous batching), so that no curve is flattened against the axis.
bool latency_log_scale(double slo_ms, double p50_min, double p50_max, double p99_max);

/// Writes DIR/plots/{plots.gp, *.dat} and runs gnuplot there (its output in plots/gnuplot.log).
/// Never throws for plotting problems: they become warnings.
/// `records` feed the CDFs and the TTFT/queue timelines (the same window as the summary's);
/// `server` (server_metrics.jsonl) the server-state figures of HTTP runs, `steps` those of the others.
PlotResult write_plots(const std::string& dir, const Summary& summary, const std::vector<RequestRecord>& records,
                       const std::vector<StepRecord>& steps, const PlotOptions& options = {},
                       const std::vector<ServerSample>& server = {});

/// Each strategy's capacity: the highest rate (req/s, open-loop runs) whose run meets the SLO
/// (RunMetrics::meets_slo), NaN when none does. In strategy order.
std::vector<std::pair<std::string, double>> strategy_capacities(const Summary& summary);

/// A file-name-safe form of a strategy name ("continuous-paged" stays, "a b/c" → "a_b_c").
std::string slug(const std::string& name);

}  // namespace servelab::analysis
