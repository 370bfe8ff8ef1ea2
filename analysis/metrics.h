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
#include <cmath>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "analysis/percentiles.h"
#include "loadgen/records/record.h"
#include "loadgen/records/step_record.h"

namespace servelab::analysis {

/// A latency of a request whose SLO threshold or percentile objective may be named.
enum class SloMetric { ttft, tpot, itl, e2e };
const char* to_string(SloMetric m);               ///< "ttft", "tpot", "itl", "e2e"
SloMetric parse_slo_metric(const std::string& s);  ///< throws std::invalid_argument listing them

/// A run-level objective in DistServe's form: the run's `percentile`-th percentile of `metric`
/// must be <= max_ms ("TTFT p99 <= 2000 ms"). Evaluated over the same samples the run's
/// distribution of that metric holds (TPOT over requests, ITL over pooled gaps).
struct PercentileSlo {
  SloMetric metric = SloMetric::ttft;
  double percentile = 99.0;  ///< in (0, 100]
  double max_ms = 0.0;       ///< > 0, finite

  /// "TTFT p99 <= 2000 ms".
  std::string name() const;
};

/// Latency service-level objective. Per request (any combination; +inf = no bound on that
/// latency): TTFT <= ttft_ms, TPOT <= tpot_ms, every inter-token gap <= itl_ms, E2E <= e2e_ms.
/// Per run: every `percentiles` objective. `attainment` is the target share of requests meeting
/// the per-request SLO (capacity search, gates); a run "meets the SLO" when its attainment
/// reaches it and every percentile objective holds.
struct SloSpec {
  double ttft_ms = 1000.0;
  double tpot_ms = 150.0;
  double attainment = 0.9;  ///< in (0, 1]
  double itl_ms = HUGE_VAL;  ///< +inf: no bound
  double e2e_ms = HUGE_VAL;  ///< +inf: no bound
  std::vector<PercentileSlo> percentiles;

  /// Throws std::invalid_argument naming the field: thresholds > 0 (+inf allowed), attainment in
  /// (0, 1], each percentile objective's percentile in (0, 100] and max_ms finite > 0.
  void validate() const;
  /// "TTFT <= 1000 ms and TPOT <= 150 ms per request; TTFT p99 <= 2000 ms per run".
  std::string describe() const;
};

/// Which measured requests the metrics use (a steady-state window). Give seconds or requests,
/// not both: by seconds, requests arriving in the first skip_first_s after the first measured
/// arrival or the last skip_last_s before the last measured arrival are dropped; by requests, the
/// first skip_first_requests and last skip_last_requests by arrival (then id). Every metric (counts,
/// latencies, throughput window, goodput, attainment, KV figures) is then computed over the kept
/// requests as if they were the whole run.
struct WindowSpec {
  double skip_first_s = 0.0;
  double skip_last_s = 0.0;
  int skip_first_requests = 0;
  int skip_last_requests = 0;

  bool enabled() const {
    return skip_first_s > 0 || skip_last_s > 0 || skip_first_requests > 0 || skip_last_requests > 0;
  }
  /// Throws std::invalid_argument: each >= 0 and finite, seconds and requests not mixed.
  void validate() const;
  /// "all measured requests", "dropping the first 5 s and last 5 s of arrivals", ...
  std::string describe() const;
};

/// How compute_metrics summarises: extra percentiles of every latency distribution (beside the
/// fixed p50, p90, p95, p99, p99.9) and the measurement window.
struct MetricsOptions {
  std::vector<double> percentiles;  ///< each in [0, 100]
  WindowSpec window;

  void validate() const;  ///< throws std::invalid_argument naming the field
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
  /// Speculative decoding over the window's steps (vLLM's spec_decode_* counters): verifications,
  /// drafted tokens, accepted ones. Acceptance rate = accepted / drafted; mean acceptance length
  /// = 1 + accepted / drafts (tokens a verification step yields).
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_num_accepted_tokens_per_pos;  ///< accepted drafts by position (0 = first)
  std::vector<int64_t> spec_num_draft_tokens_per_pos;     ///< drafts of more than j tokens (position j)
  /// The spec counters came from the server's /metrics (HTTP runs: its counters after the run minus
  /// before it, the whole run rather than the window; summary.json "source": "server_metrics").
  bool spec_from_server = false;
  /// Structured output over the window's steps: token masks filled, their host seconds, and
  /// tokens appended by jump-forward (without a forward of their own).
  int64_t structured_masks = 0;
  double structured_mask_s = 0.0;
  int64_t jump_forward_tokens = 0;
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
  /// One result per SloSpec::percentiles entry: the run's value and whether it met the bound.
  struct PercentileSloResult {
    PercentileSlo slo;
    double value_ms = 0.0;  ///< NaN when the run has no samples of that metric (then not met)
    bool met = false;
  };
  std::vector<PercentileSloResult> slo_percentiles;
  KvMetrics kv;

  // Counts and the window.
  std::size_t n_requests = 0;  ///< measured (non-warm-up) records
  std::size_t n_ok = 0;
  std::size_t n_failed = 0;  ///< status != ok
  std::size_t n_warmup = 0;  ///< records left out as warm-up
  std::size_t n_window_dropped = 0;  ///< measured records left out by the window (MetricsOptions)
  std::size_t n_slo_met = 0;
  int64_t n_prompt_tokens = 0;    ///< over ok requests
  int64_t n_output_tokens = 0;    ///< over ok requests
  int64_t n_preemptions = 0;      ///< over measured requests
  double window_start_s = 0.0;    ///< first arrival
  double window_end_s = 0.0;      ///< last finish
  double duration_s = 0.0;        ///< window_end_s − window_start_s
  bool lateness_warning = false;  ///< lateness p99 > 1 ms: the generator could not keep up

  /// Every percentile objective met (true when there are none).
  bool slo_percentiles_met() const;
  /// The run meets the SLO: attainment >= target and every percentile objective met.
  bool meets_slo(const SloSpec& slo) const;
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
/// `options` adds percentiles and a steady-state window (default: none, every measured request).
RunMetrics compute_metrics(const std::string& label, const std::vector<RequestRecord>& records,
                           const std::vector<StepRecord>& steps, const SloSpec& slo,
                           const MetricsOptions& options = {});

/// The latency samples (ms) compute_metrics summarises for `label` under the same window: TTFT,
/// TPOT, pooled ITL gaps and E2E of its ok requests with output; for CDF plots.
struct LatencySamples {
  std::vector<double> ttft_ms, tpot_ms, itl_ms, e2e_ms;
};
LatencySamples latency_samples(const std::string& label, const std::vector<RequestRecord>& records,
                               const WindowSpec& window = {});

/// KV figures of one run's steps (only those whose `run` equals `label`) over the window
/// [window_start_s, window_end_s]: a step [start_s, start_s + duration_s] counts with weight equal
/// to its overlap with the window; a step that starts inside the window with zero duration counts
/// with weight 0 (in the maxima, not the means); steps outside are left out.
KvMetrics compute_kv_metrics(const std::string& label, const std::vector<StepRecord>& steps,
                             double window_start_s, double window_end_s);

/// DESIGN.md's "metrics" object, with units in every rate's name: "ttft_ms", "tpot_ms",
/// "itl_ms", "e2e_ms", "request_throughput_rps", "output_throughput_tok_s",
/// "total_throughput_tok_s", "goodput_tok_s", "request_goodput_rps", "slo_attainment",
/// "slo_percentiles" (when the SLO has any: [{metric, percentile, max_ms, value_ms, met}]),
/// "kv_utilization": {mean, max}, "lateness_ms", then extras: "queue_ms", "prefill_ms" (TTFT's
/// two parts, distributions), "kv_breakdown" {stored, reserved,
/// internal_frag, external_frag, free}, "kv_peak_use", "batch_size" {mean, max}, "n_steps",
/// "n_ok", "n_warmup", "n_window_dropped", "n_slo_met", "n_prompt_tokens", "n_output_tokens", "n_preemptions",
/// "window_start_s", "duration_s", "lateness_warning". (n_requests and n_failed sit on the run.)
void to_json(nlohmann::ordered_json& j, const RunMetrics& m);
/// Reads the form above (extras optional, so older or foreign summaries load; the rates'
/// unit-less names of servelab.summary/1 before units were added — "goodput", "request_goodput",
/// "output_throughput", "request_throughput", "total_throughput" — are read too).
void from_json(const nlohmann::ordered_json& j, RunMetrics& m);

}  // namespace servelab::analysis
