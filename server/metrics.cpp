#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>

namespace servelab::server {

namespace {

/// The shortest text that reads back as `v` (0.005, not %.17g's 0.0050000000000000001): bucket
/// labels are matched as strings by PromQL (le="0.005"), so they must read as written.
std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out;
}

// vLLM's bucket bounds (seconds).
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kTpotBounds = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBounds = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                        30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};

}  // namespace

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  ++counts_[i];
  ++count_;
  sum_ += v;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_sum{" + labels + "} " + num(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_("model_name=\"" + escape_label(model_name) + "\""),
      ttft_(kTtftBounds), tpot_(kTpotBounds), itl_(kTpotBounds), e2e_(kE2eBounds) {}

void ServerMetrics::set_gauges(int n_running, int n_waiting, double kv_usage) {
  std::lock_guard lock(mu_);
  s_.n_running = n_running;
  s_.n_waiting = n_waiting;
  s_.kv_usage = kv_usage;
}

void ServerMetrics::add_preemptions(uint64_t n) {
  std::lock_guard lock(mu_);
  s_.n_preemptions += n;
}

void ServerMetrics::add_spec_decode(int drafts, int draft_tokens, int accepted, const std::vector<int>& per_pos) {
  std::lock_guard lock(mu_);
  s_.spec_num_drafts += uint64_t(drafts);
  s_.spec_num_draft_tokens += uint64_t(draft_tokens);
  s_.spec_num_accepted_tokens += uint64_t(accepted);
  if (s_.spec_num_accepted_tokens_per_pos.size() < per_pos.size()) s_.spec_num_accepted_tokens_per_pos.resize(per_pos.size(), 0);
  for (size_t p = 0; p < per_pos.size(); ++p) s_.spec_num_accepted_tokens_per_pos[p] += uint64_t(per_pos[p]);
}

void ServerMetrics::on_finished(const FinishedTimings& t) {
  std::lock_guard lock(mu_);
  s_.n_prompt_tokens += t.n_prompt;
  s_.n_generation_tokens += t.n_output;
  ++s_.finished[t.finished_reason];
  if (!t.lora.empty()) {
    LoraCounts& c = s_.lora_finished[t.lora];
    ++c.n_requests;
    c.n_prompt_tokens += uint64_t(t.n_prompt);
    c.n_generation_tokens += uint64_t(t.n_output);
  }
  e2e_.observe(t.e2e_s);
  if (t.ttft_s >= 0) ttft_.observe(t.ttft_s);
  const auto& tt = t.token_times_s;
  for (size_t i = 1; i < tt.size(); ++i) itl_.observe(tt[i] - tt[i - 1]);
  if (tt.size() > 1) tpot_.observe((tt.back() - tt.front()) / static_cast<double>(tt.size() - 1));
  s_.n_ttft = ttft_.count();
  s_.n_e2e = e2e_.count();
}

void ServerMetrics::set_lora_requests(std::vector<std::string> running, std::vector<std::string> waiting, int max_loras) {
  const double t = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard lock(mu_);
  s_.lora_running = std::move(running);
  s_.lora_waiting = std::move(waiting);
  s_.max_lora = max_loras;
  s_.lora_info_time_s = t;
}

void ServerMetrics::on_rejected(const std::string& reason) {
  std::lock_guard lock(mu_);
  ++s_.rejected[reason];
}

MetricsSnapshot ServerMetrics::snapshot() const {
  std::lock_guard lock(mu_);
  return s_;
}

std::string ServerMetrics::render() const {
  std::lock_guard lock(mu_);
  std::string o;
  auto head = [&](const std::string& name, const char* type, const char* help) {
    o += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto line = [&](const std::string& name, const std::string& extra, const std::string& v) {
    o += name + "{" + labels_ + extra + "} " + v + "\n";
  };
  head("servelab:num_requests_running", "gauge", "Requests in the engine's running batch.");
  line("servelab:num_requests_running", "", std::to_string(s_.n_running));
  head("servelab:num_requests_waiting", "gauge", "Requests waiting to be scheduled.");
  line("servelab:num_requests_waiting", "", std::to_string(s_.n_waiting));
  head("servelab:kv_cache_usage_perc", "gauge", "KV-cache usage: 1 means 100 percent.");
  line("servelab:kv_cache_usage_perc", "", num(s_.kv_usage));
  head("servelab:num_preemptions_total", "counter", "Cumulative preemptions.");
  line("servelab:num_preemptions_total", "", std::to_string(s_.n_preemptions));
  head("servelab:prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  line("servelab:prompt_tokens_total", "", std::to_string(s_.n_prompt_tokens));
  head("servelab:generation_tokens_total", "counter", "Generated tokens of finished requests.");
  line("servelab:generation_tokens_total", "", std::to_string(s_.n_generation_tokens));
  head("servelab:request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* r : {"length", "stop", "abort", "error"}) {
    auto it = s_.finished.find(r);
    line("servelab:request_success_total", std::string(",finished_reason=\"") + r + "\"",
         std::to_string(it == s_.finished.end() ? 0 : it->second));
  }
  head("servelab:request_rejected_total", "counter", "Requests refused before reaching the engine, by reason.");
  for (const char* r : {"queue_full", "invalid", "too_long", "unauthorized", "body_too_large", "draining"}) {
    auto it = s_.rejected.find(r);
    line("servelab:request_rejected_total", std::string(",reason=\"") + r + "\"",
         std::to_string(it == s_.rejected.end() ? 0 : it->second));
  }
  if (s_.spec_num_drafts > 0) {  // vLLM exposes these only with a speculative config, too
    head("servelab:spec_decode_num_drafts_total", "counter", "Verifications of drafted tokens (one per sequence and step).");
    line("servelab:spec_decode_num_drafts_total", "", std::to_string(s_.spec_num_drafts));
    head("servelab:spec_decode_num_draft_tokens_total", "counter", "Drafted tokens verified.");
    line("servelab:spec_decode_num_draft_tokens_total", "", std::to_string(s_.spec_num_draft_tokens));
    head("servelab:spec_decode_num_accepted_tokens_total", "counter", "Drafted tokens accepted.");
    line("servelab:spec_decode_num_accepted_tokens_total", "", std::to_string(s_.spec_num_accepted_tokens));
    head("servelab:spec_decode_num_accepted_tokens_per_pos_total", "counter", "Drafted tokens accepted, by draft position.");
    for (size_t p = 0; p < s_.spec_num_accepted_tokens_per_pos.size(); ++p)
      line("servelab:spec_decode_num_accepted_tokens_per_pos_total", ",position=\"" + std::to_string(p) + "\"",
           std::to_string(s_.spec_num_accepted_tokens_per_pos[p]));
  }
  if (s_.max_lora > 0) {  // vLLM's gauge: its labels carry the state, its value when it was taken
    auto joined = [](const std::vector<std::string>& v) {
      std::string j;
      for (const std::string& n : v) j += (j.empty() ? "" : ",") + escape_label(n);
      return j;
    };
    head("servelab:lora_requests_info", "gauge", "Running stats on LoRA requests.");
    line("servelab:lora_requests_info",
         ",max_lora=\"" + std::to_string(s_.max_lora) + "\",running_lora_adapters=\"" + joined(s_.lora_running) +
             "\",waiting_lora_adapters=\"" + joined(s_.lora_waiting) + "\"",
         num(s_.lora_info_time_s));
    // Per adapter (servelab's own; vLLM has none): finished requests and their tokens.
    const std::pair<const char*, uint64_t LoraCounts::*> counters[] = {
        {"lora_request_success", &LoraCounts::n_requests},
        {"lora_prompt_tokens", &LoraCounts::n_prompt_tokens},
        {"lora_generation_tokens", &LoraCounts::n_generation_tokens}};
    const char* help[] = {"Finished requests, by LoRA adapter.", "Prompt tokens of finished requests, by LoRA adapter.",
                          "Generated tokens of finished requests, by LoRA adapter."};
    for (size_t i = 0; i < 3; ++i) {
      const std::string name = std::string("servelab:") + counters[i].first + "_total";
      head(name, "counter", help[i]);
      for (const auto& [adapter, c] : s_.lora_finished)
        line(name, ",lora_name=\"" + escape_label(adapter) + "\"", std::to_string(c.*counters[i].second));
    }
  }
  head("servelab:time_to_first_token_seconds", "histogram", "Time to first token.");
  ttft_.render(o, "servelab:time_to_first_token_seconds", labels_);
  head("servelab:time_per_output_token_seconds", "histogram", "Mean time per output token after the first, per request.");
  tpot_.render(o, "servelab:time_per_output_token_seconds", labels_);
  head("servelab:inter_token_latency_seconds", "histogram", "Gaps between consecutive output tokens.");
  itl_.render(o, "servelab:inter_token_latency_seconds", labels_);
  head("servelab:e2e_request_latency_seconds", "histogram", "End-to-end request latency.");
  e2e_.render(o, "servelab:e2e_request_latency_seconds", labels_);
  return o;
}

}  // namespace servelab::server
