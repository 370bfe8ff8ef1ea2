#pragma once
// The server's own state over a run, on the run's time axis (seconds from its start, as
// records.jsonl): what report.html draws under the client's TTFT and queue length.
//   HTTP runs: DIR/server_metrics.jsonl, the target's Prometheus /metrics scraped every 250 ms
//     (loadgen/http/server_metrics.h writes it; one line per scrape and replica).
//   In-process runs: DIR/steps.jsonl, the engine's own counts after every step.
// Either becomes the same ServerState series, so both kinds of run get the same figure.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loadgen/records/step_record.h"

namespace servelab::analysis {

/// One server_metrics.jsonl line: {"run", "url", "t_s", "engine", "running", "waiting",
/// "kv_usage", "preemptions", "ttft_count", "ttft_sum_s", "spec_drafts", "spec_draft_tokens",
/// "spec_accepted_tokens", "spec_accepted_per_pos"}; a figure the server does not export is absent
/// (NaN here; an empty per-position list).
struct ServerSample {
  std::string run;
  std::string url;
  double t_s = 0.0;
  std::string engine;
  double running = NAN;
  double waiting = NAN;
  double kv_usage = NAN;     ///< share of the KV cache in use, [0, 1]
  double preemptions = NAN;  ///< cumulative since the server started
  double ttft_count = NAN;   ///< the server's TTFT histogram: observations and their sum (s)
  double ttft_sum_s = NAN;
  /// vLLM's spec_decode counters, cumulative since the server started.
  double spec_drafts = NAN, spec_draft_tokens = NAN, spec_accepted_tokens = NAN;
  std::vector<double> spec_accepted_per_pos;
};

/// Reads server_metrics.jsonl; throws std::runtime_error("path:line: message") on a malformed line
/// (a last line cut by a kill is dropped and sets *cut_tail).
std::vector<ServerSample> read_server_samples(const std::string& path, bool* cut_tail = nullptr);

/// A run's speculative decoding as the server counted it: per replica, its last scrape's
/// spec_decode counters minus its first (the scraper takes one before the run's first request and
/// one after its last answer, as `vllm bench serve` does), summed over replicas. nullopt when no
/// replica exported the counters or none drafted during the run. A replica whose counters went down
/// (it restarted during the run) is left out.
struct ServerSpecCounters {
  int64_t num_drafts = 0, num_draft_tokens = 0, num_accepted_tokens = 0;
  std::vector<int64_t> num_accepted_tokens_per_pos;
};
std::optional<ServerSpecCounters> server_spec_counters(const std::vector<ServerSample>& samples, const std::string& run);

/// The server's state at one instant of a run.
struct ServerState {
  double t_s = 0.0;
  double running = NAN;      ///< requests in the running batch (summed over replicas)
  double waiting = NAN;      ///< requests queued in the server (summed over replicas)
  double kv_pct = NAN;       ///< KV cache in use, % of capacity (mean over replicas)
  double preemptions = NAN;  ///< since the run's first sample (summed over replicas)
  double ttft_ms = NAN;      ///< the server's own mean TTFT since the previous sample (NaN: none finished)
};

/// The series of run `run` from scraped samples, in time order: each sample updates its replica's
/// latest figures, and the state after it sums (running, waiting, preemptions) or averages (KV)
/// over the replicas seen so far. Preemptions count from each replica's first sample.
std::vector<ServerState> server_state_from_samples(const std::vector<ServerSample>& samples, const std::string& run);

/// The series of run `run` from its engine steps: the state after each step (start + duration):
/// n_running, n_waiting, (stored + reserved + internal) / capacity, preemptions summed over steps.
/// No server TTFT (the client's is the engine's own here).
std::vector<ServerState> server_state_from_steps(const std::vector<StepRecord>& steps, const std::string& run);

}  // namespace servelab::analysis
