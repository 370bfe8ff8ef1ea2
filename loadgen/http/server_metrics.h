#pragma once
// The server's own state beside every latency: during an HTTP run, its Prometheus /metrics are
// scraped every 250 ms into DIR/server_metrics.jsonl, on the run's time axis (seconds from the
// run's start, as records.jsonl), one line per scrape and replica:
//   {"run", "url", "t_s", "engine", "running", "waiting", "kv_usage", "preemptions",
//    "ttft_count", "ttft_sum_s", "spec_drafts", "spec_draft_tokens", "spec_accepted_tokens",
//    "spec_accepted_per_pos"}
//   (a figure the server does not export is left out). The first scrape is taken before the run's
//   first request and the last after its last answer, so the cumulative spec_decode counters'
//   difference between them is the run's speculation, as `vllm bench serve` reads it
//   (analysis/server_state.h: server_spec_counters; summary.json's metrics.spec_decode).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "loadgen/target.h"

namespace servelab::http_load {

/// One scrape's figures, each summed over its label sets (models, engines); nullopt = not exported.
struct ServerSample {
  std::string engine;                  ///< metrics_engine(): servelab, vLLM, SGLang, TGI, llama.cpp
  std::optional<double> running;       ///< requests in the running batch
  std::optional<double> waiting;       ///< requests queued
  std::optional<double> kv_usage;      ///< KV cache in use, in [0, 1]
  std::optional<double> preemptions;   ///< cumulative
  std::optional<double> ttft_count;    ///< the server's TTFT histogram: observations ...
  std::optional<double> ttft_sum_s;    ///< ... and their sum
  /// Speculative decoding, cumulative (vLLM's spec_decode_num_drafts / _num_draft_tokens /
  /// _num_accepted_tokens counters).
  std::optional<double> spec_drafts, spec_draft_tokens, spec_accepted_tokens;
  /// *:spec_decode_num_accepted_tokens_per_pos_total by its `position` label (index 0 = the first
  /// draft), summed over the other labels; empty = not exported.
  std::vector<double> spec_accepted_per_pos;
};

/// Reads a Prometheus text exposition by the names servelab and vLLM use (SGLang's and TGI's
/// where they differ): *:num_requests_running, sglang:num_running_reqs, tgi_batch_current_size;
/// *:num_requests_waiting, sglang:num_queue_reqs, tgi_queue_size; *:kv_cache_usage_perc,
/// vllm:gpu_cache_usage_perc, sglang:token_usage; *:num_preemptions_total;
/// *:time_to_first_token_seconds_{count,sum}; *:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total
/// and *:spec_decode_num_accepted_tokens_per_pos_total{position="j"}.
ServerSample parse_server_metrics(const std::string& text);

/// The JSON line of one sample (with '\n').
std::string server_sample_line(const std::string& run, const std::string& url, double t_s, const ServerSample& s);

/// Scrapes every endpoint of `target` once in the constructor (before the run's first request),
/// then each `period_s` on its own thread, and once more in stop() (after the run's last answer),
/// appending lines to `path`. A replica whose first scrape is not 200 (no /metrics) is not asked
/// again. t_s counts from `t0`, the run's start.
class MetricsScraper {
 public:
  MetricsScraper(const TargetSpec& target, std::string run_label, std::string path,
                 std::chrono::steady_clock::time_point t0, double period_s = 0.25);
  ~MetricsScraper();
  MetricsScraper(const MetricsScraper&) = delete;
  MetricsScraper& operator=(const MetricsScraper&) = delete;
  void stop();
  int n_samples() const { return n_samples_; }

 private:
  void loop();
  void scrape_all();  ///< one scrape of every live replica, appended to out_
  TargetSpec target_;
  std::string run_, path_;
  std::chrono::steady_clock::time_point t0_;
  double period_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::atomic<int> n_samples_{0};
  std::vector<Endpoint> endpoints_;
  std::vector<bool> live_, answered_;
  std::ofstream out_;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace servelab::http_load
