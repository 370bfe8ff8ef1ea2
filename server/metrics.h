#pragma once
// ServerMetrics: what GET /metrics exposes, in Prometheus text format, named after vLLM's metrics
// with a `servelab:` prefix (vllm:time_to_first_token_seconds -> servelab:time_to_first_token_seconds)
// so dashboards built for vLLM map over. Thread-safe: the engine thread and HTTP threads update it.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace servelab::server {

/// A cumulative Prometheus histogram over fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  /// Appends `name_bucket{le=..}`, `name_sum`, `name_count` lines with `labels` ("k=\"v\"").
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  ///< per bucket (not cumulative); the last is +Inf
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

/// One finished request's timings, seconds from its arrival at the server.
struct FinishedTimings {
  double ttft_s = -1.0;              ///< -1: no token came
  std::vector<double> token_times_s; ///< every output token of sample 0
  double e2e_s = 0.0;
  int n_prompt = 0;
  int n_output = 0;                  ///< over all samples
  std::string finished_reason;       ///< "length", "stop", "abort", "error"
  std::string lora;                  ///< the adapter it ran on ("" = the base model)
};

/// One adapter's finished requests and their tokens (/metrics' per-adapter counters).
struct LoraCounts {
  uint64_t n_requests = 0;
  uint64_t n_prompt_tokens = 0;
  uint64_t n_generation_tokens = 0;
};

/// A copy of the counters and gauges (tests check them for consistency).
struct MetricsSnapshot {
  int n_running = 0;
  int n_waiting = 0;
  double kv_usage = 0.0;                        ///< 0..1
  uint64_t n_preemptions = 0;
  uint64_t n_prompt_tokens = 0;
  uint64_t n_generation_tokens = 0;
  std::map<std::string, uint64_t> finished;     ///< by finished_reason
  std::map<std::string, uint64_t> rejected;     ///< by reason: queue_full, invalid, too_long, unauthorized, body_too_large, draining
  uint64_t n_ttft = 0, n_e2e = 0;               ///< histogram counts
  /// Speculative decoding (vLLM's spec_decode_* counters): verifications, drafted tokens,
  /// accepted ones, and accepted by draft position (index 0 = first draft).
  uint64_t spec_num_drafts = 0, spec_num_draft_tokens = 0, spec_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_num_accepted_tokens_per_pos;
  /// Multi-LoRA (serve --enable-lora; vLLM's lora_requests_info): the adapters of the requests
  /// running and waiting after the last step, max_loras, and when that was (Unix seconds). max_lora
  /// 0: LoRA is off and the gauge is not rendered.
  std::vector<std::string> lora_running, lora_waiting;
  int max_lora = 0;
  double lora_info_time_s = 0.0;
  /// Finished requests and tokens by adapter (requests on the base model are not listed), rendered
  /// with max_lora > 0 as servelab:lora_{request_success,prompt_tokens,generation_tokens}_total
  /// {lora_name="..."} (servelab's own: vLLM has no per-adapter counter).
  std::map<std::string, LoraCounts> lora_finished;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);
  void set_gauges(int n_running, int n_waiting, double kv_usage);
  void add_preemptions(uint64_t n);
  /// One engine step's speculative counters (StepOutcome::spec_*).
  void add_spec_decode(int drafts, int draft_tokens, int accepted, const std::vector<int>& accepted_per_pos);
  /// The adapters of the requests running and waiting now (Engine::lora_requests) under max_loras.
  void set_lora_requests(std::vector<std::string> running, std::vector<std::string> waiting, int max_loras);
  void on_finished(const FinishedTimings& t);
  void on_rejected(const std::string& reason);
  /// The Prometheus text exposition (version 0.0.4).
  std::string render() const;
  MetricsSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  std::string labels_;  ///< model_name="..."
  MetricsSnapshot s_;
  Histogram ttft_, tpot_, itl_, e2e_;
};

}  // namespace servelab::server
