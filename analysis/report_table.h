#pragma once
// The runs table shared by the console, report.md, report.html and results.csv: one row per
// strategy × rate, the same columns everywhere.
#include <string>
#include <vector>

#include "analysis/summary.h"

namespace servelab::analysis {

/// How a column's numbers print for humans.
enum class CellKind { count, number, share };

/// One numeric column of the runs table.
struct RunColumn {
  std::string header;        ///< for humans: "TTFT p50 (ms)"
  std::string short_header;  ///< for the console, where width is scarce: "TTFT p50"
  std::string csv_key;       ///< for results.csv: "ttft_p50_ms"
  CellKind kind;
  double (*value)(const RunSummary&);
};

/// n, failed, TTFT p50/p99, TTFT's parts (queue p50, prefill p50), TPOT p50/p99, ITL p50/p99, E2E p50, output tok/s, goodput tok/s,
/// SLO attainment, KV utilization (mean).
const std::vector<RunColumn>& run_columns();

/// Runs ordered for tables: by strategy (first appearance), then rate ascending.
std::vector<const RunSummary*> table_order(const Summary& s);

/// Header ("strategy", "rate (req/s)", then run_columns() headers) and a row's cells for humans.
/// `compact`: the console's short headers (units given once under the table).
std::vector<std::string> run_table_header(bool compact = false);
std::vector<std::string> run_table_cells(const RunSummary& r);

/// KV table for humans: strategy, rate, utilization mean/max, the five breakdown shares, peak use.
std::vector<std::string> kv_table_header();
std::vector<std::string> kv_table_cells(const RunSummary& r);

/// A header and rows of a table for humans.
struct TextRows {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  bool empty() const { return rows.empty(); }
};

/// Repeated runs: per run with repetitions, each key metric as "mean ± half-width of the 95% CI
/// (sd S, min M)"; empty without repetitions.
TextRows repeats_table(const Summary& s);
/// report.percentiles: per run, TTFT/TPOT/ITL/E2E at each configured percentile; empty when none.
TextRows percentiles_table(const Summary& s);
/// slo.percentiles: per run, each objective's value and met/MISSED; empty when none.
TextRows slo_objectives_table(const Summary& s);
/// Structured output (workload.structured_output): per run with constrained requests, how many,
/// the share valid against their schema, TTFT/TPOT p50 and decode speed constrained vs not, the
/// TPOT cost and the most frequent invalid reason; empty when no run had any.
TextRows structured_output_table(const Summary& s);
/// Speculative decoding: per run that drafted, vLLM's counters (drafts, drafted and accepted
/// tokens), the acceptance rate, the mean acceptance length, acceptance by draft position and
/// where the counts come from (the engine's steps, or the server's /metrics for HTTP runs).
/// Empty when no run drafted.
TextRows spec_decode_table(const Summary& s);
/// Multi-LoRA: per run whose records name adapters, each adapter's requests ("(base)" for none)
/// by request count, most first: failures, TTFT p50/p99, queue p50, TPOT p50, E2E p50, output
/// tok/s over its own requests and SLO attainment; at most `max_adapters` a run, then a row
/// counting the rest (summary.json's "lora" has every one). Empty when no run has adapters.
TextRows lora_table(const Summary& s, size_t max_adapters = 16);
/// Multi-LoRA: per run whose steps loaded adapters into slots (lora_loads.h), the loads, the steps
/// that did them, those steps' median and total time. Empty when no run loaded any.
TextRows lora_loads_table(const Summary& s);
/// Roofline efficiency (roofline_efficiency.h): per run, Σ roofline / Σ measured step time
/// overall and per step class with each class's step count; sim runs say "sim" (their times are
/// priced, not measured). Empty when no run has one.
TextRows roofline_table(const Summary& s);
/// Storage formats (report_formats.cpp), when some run carries an accuracy (format_accuracy.h):
/// per strategy its weight and KV formats, capacity, peak goodput, and against the model's own
/// formats the top-1 agreement, KL divergence and logit errors ("reference" for a strategy in
/// the model's formats; the note where the run could not measure it). Empty otherwise.
TextRows formats_table(const Summary& s);
/// Lines saying how the metrics were made: the SLO, the window, repetitions, each strategy's
/// capacity (highest rate meeting the SLO), the roofline's ceilings.
std::vector<std::string> method_lines(const Summary& s);

}  // namespace servelab::analysis
