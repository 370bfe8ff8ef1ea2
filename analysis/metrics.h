#pragma once
// Per-run metrics, exactly as DESIGN.md ("Metric definitions") defines them, computed from the
// raw records of one run (one strategy × rate). Every number here can be recomputed from
// records.jsonl and steps.jsonl by hand; tests/analysis/metrics_test.cpp does so.
//
// Definitions (times from records are seconds; latencies here are milliseconds):
//   arrival   = the request's intended send time (arrival_s), coordinated-omission safe.
//   TTFT      = first_token_s − arrival_s.
//   E2E       = last token time − arrival_s (the last entry of token_times_s; end_s when the
//               record carries no token times).
//   TPOT      = (E2E − TTFT) / (output_tokens − 1), for ok requests with output_tokens > 1.
//   queue     = scheduled_s − arrival_s (waiting to be admitted to a batch) and
//   prefill   = first_token_s − scheduled_s: TTFT split in two, over ok requests with a first
//               token and a scheduled_s (records without one are left out of both).
//   ITL       = every gap between consecutive output tokens, pooled over ok requests; see itl_gaps.
//   lateness  = sent_s − arrival_s, over every measured request that was sent (any status).
//   window    = first arrival → last finish (end_s) over the measured requests, warm-up excluded.
//   throughput (request / output / total tokens) = Σ over ok requests / window.
//   SLO met   = ok and TTFT ≤ slo.ttft_ms and (output_tokens ≤ 1 or TPOT ≤ slo.tpot_ms), compared
//               with 1 ns of slack for floating-point error; an ok request with 0 output tokens
//               delivered nothing and does not meet it.
//   goodput   = Σ output tokens of SLO-meeting requests / window (tokens/s);
//   request goodput = SLO-meeting requests / window; attainment = SLO-meeting / measured requests
//               (a failed request counts against attainment: it did not meet the SLO).
//   A run with no measured request has no window: its throughputs, goodput and attainment are
//   NaN (JSON null), not 0; so are the throughputs of a zero-length window.
//   KV utilization = StepRecord::kv_utilization() = stored / (stored + reserved + internal),
//               mean and max over the run's steps where requests hold memory (used > 0).
//   KV figures (utilization, breakdown, peak use, batch size) describe the measurement window
//               only: a step counts for its time inside [window start, window end] (warm-up
//               steps before it and idle steps after it are left out), and means are weighted
//               by that time, so a 50 ms prefill step weighs five times a 10 ms decode step.
// "Measured" requests are the run's records with warmup == false. Failed requests (status != ok)
// count in n_failed and in the window, never in latency percentiles or throughput.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "analysis/percentiles.h"
#include "loadgen/records/record.h"
#include "loadgen/records/step_record.h"

namespace servelab::analysis {

/// Latency service-level objective. A request meets it when TTFT ≤ ttft_ms and TPOT ≤ tpot_ms;
/// `attainment` is the target share of requests meeting it (capacity search, gates).
struct SloSpec {
  double ttft_ms = 1000.0;
  double tpot_ms = 150.0;
  double attainment = 0.9;  ///< in (0, 1]

  /// Throws std::invalid_argument naming the field: ttft_ms and tpot_ms > 0, attainment in (0, 1].
  void validate() const;
};

/// Mean shares of the KV arena over a run's steps (each in [0, 1]; they sum to ~1), the vLLM
/// paper's breakdown: token states stored, reserved for future tokens, internal fragmentation
/// (slack inside allocated blocks / regions), external fragmentation (free but unusable gaps), free.
struct KvBreakdown {
  double stored = 0.0;
  double reserved = 0.0;
  double internal_frag = 0.0;
  double external_frag = 0.0;
  double free = 0.0;
};

/// KV-cache figures of a run from its StepRecords inside the measurement window. n_steps == 0
/// (no steps recorded, e.g. an HTTP run against a foreign server, or no measured request) leaves
/// every figure NaN (JSON null). Means are weighted by each step's time inside the window.
struct KvMetrics {
  std::size_t n_steps = 0;        ///< steps of the run inside the window
  std::size_t n_steps_used = 0;   ///< of those, steps where requests held memory (used > 0)
  double utilization_mean = 0.0;  ///< time-weighted mean of kv_utilization() over used steps
  double utilization_max = 0.0;
  KvBreakdown breakdown;         ///< time-weighted mean shares of capacity over used steps
  double peak_use = 0.0;         ///< max over the window's steps of (stored+reserved+internal)/capacity
  double batch_size_mean = 0.0;  ///< time-weighted mean StepRecord::batch_size over the window's steps
  int batch_size_max = 0;
};

/// Everything analysis reports for one run. Latency distributions are in milliseconds,
/// throughputs per second of the window.
struct RunMetrics {
  Distribution ttft_ms;
  Distribution tpot_ms;
  Distribution itl_ms;
  Distribution e2e_ms;
  Distribution lateness_ms;
  Distribution queue_ms;    ///< scheduled − arrival
  Distribution prefill_ms;  ///< first token − scheduled
  double request_throughput = 0.0;  ///< ok requests / s
  double output_throughput = 0.0;   ///< output tokens of ok requests / s
  double total_throughput = 0.0;    ///< prompt + output tokens of ok requests / s
  double goodput = 0.0;             ///< output tokens of SLO-meeting requests / s
  double request_goodput = 0.0;     ///< SLO-meeting requests / s
  double slo_attainment = 0.0;      ///< SLO-meeting / measured requests, in [0, 1]
  KvMetrics kv;

  // Counts and the window.
  std::size_t n_requests = 0;  ///< measured (non-warm-up) records
  std::size_t n_ok = 0;
  std::size_t n_failed = 0;  ///< status != ok
  std::size_t n_warmup = 0;  ///< records left out as warm-up
  std::size_t n_slo_met = 0;
  int64_t n_prompt_tokens = 0;    ///< over ok requests
  int64_t n_output_tokens = 0;    ///< over ok requests
  int64_t n_preemptions = 0;      ///< over measured requests
  double window_start_s = 0.0;    ///< first arrival
  double window_end_s = 0.0;      ///< last finish
  double duration_s = 0.0;        ///< window_end_s − window_start_s
  bool lateness_warning = false;  ///< lateness p99 > 1 ms: the generator could not keep up
};

/// The ITL samples (ms) of one ok record, appended to `out`. token_times_s normally holds one
/// entry per output token; a streamed chunk that delivered k tokens at once appears as k equal
/// entries, and its gap g from the previous chunk becomes k gaps of g/k (the extra tokens of the
/// first chunk get gaps of 0: there is no earlier token to measure from). When token_times_s has
/// fewer entries than output_tokens (a client that saw chunks but not their token counts), each
/// entry is one chunk: the first carries the first token, and the other output_tokens − 1 tokens
/// are spread over the later chunks as evenly as integers allow (earlier chunks take the
/// remainder), each chunk's gap split evenly over its tokens. Either way a request with n tokens
/// yields n − 1 gaps summing to (last − first token time), so mean ITL over a request = its TPOT.
/// A record with no token times yields no gaps. Throws std::invalid_argument when token_times_s
/// has more entries than output_tokens or is not ascending.
void itl_gaps(const RequestRecord& r, std::vector<double>& out);

/// Metrics of one run. `records` and `steps` may hold other runs' lines: only those whose `run`
/// equals `label` are used. Throws std::invalid_argument("run L, request ID: ...") on an ok record
/// that lacks the times its metrics need.
RunMetrics compute_metrics(const std::string& label, const std::vector<RequestRecord>& records,
                           const std::vector<StepRecord>& steps, const SloSpec& slo);

/// KV figures of one run's steps (only those whose `run` equals `label`) over the window
/// [window_start_s, window_end_s]: a step [start_s, start_s + duration_s] counts with weight equal
/// to its overlap with the window; a step that starts inside the window with zero duration counts
/// with weight 0 (in the maxima, not the means); steps outside are left out.
KvMetrics compute_kv_metrics(const std::string& label, const std::vector<StepRecord>& steps,
                             double window_start_s, double window_end_s);

/// DESIGN.md's "metrics" object: "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "request_throughput",
/// "output_throughput", "total_throughput", "goodput", "request_goodput", "slo_attainment",
/// "kv_utilization": {mean, max}, "lateness_ms", then extras: "queue_ms", "prefill_ms" (TTFT's
/// two parts, distributions), "kv_breakdown" {stored, reserved,
/// internal_frag, external_frag, free}, "kv_peak_use", "batch_size" {mean, max}, "n_steps",
/// "n_ok", "n_warmup", "n_slo_met", "n_prompt_tokens", "n_output_tokens", "n_preemptions",
/// "window_start_s", "duration_s", "lateness_warning". (n_requests and n_failed sit on the run.)
void to_json(nlohmann::ordered_json& j, const RunMetrics& m);
/// Reads the form above (extras optional, so older or foreign summaries load).
void from_json(const nlohmann::ordered_json& j, RunMetrics& m);

}  // namespace servelab::analysis
