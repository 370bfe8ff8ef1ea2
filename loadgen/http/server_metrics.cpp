#include "loadgen/http/server_metrics.h"

#include <initializer_list>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/http/server_probe.h"

namespace servelab::http_load {

namespace {

/// Adds `value` to `slot` when the sample's name (without labels) is one of `names`.
void add_if(const std::string& name, double value, std::initializer_list<const char*> names, std::optional<double>& slot) {
  for (const char* n : names)
    if (name == n) {
      slot = slot.value_or(0.0) + value;
      return;
    }
}

}  // namespace

ServerSample parse_server_metrics(const std::string& text) {
  ServerSample s;
  s.engine = metrics_engine(text);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos) continue;
    const std::string name = line.substr(0, name_end);
    size_t value_at = line[name_end] == '{' ? line.find('}', name_end) : name_end;
    if (value_at == std::string::npos) continue;
    value_at = line.find_first_not_of(' ', value_at + (line[name_end] == '{' ? 1 : 0));
    if (value_at == std::string::npos) continue;
    double v = 0.0;
    try {
      v = std::stod(line.substr(value_at));
    } catch (const std::exception&) {
      continue;
    }
    add_if(name, v, {"servelab:num_requests_running", "vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"},
           s.running);
    add_if(name, v, {"servelab:num_requests_waiting", "vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"},
           s.waiting);
    add_if(name, v, {"servelab:kv_cache_usage_perc", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"},
           s.kv_usage);
    add_if(name, v, {"servelab:num_preemptions_total", "vllm:num_preemptions_total", "vllm:num_preemptions"}, s.preemptions);
    add_if(name, v, {"servelab:time_to_first_token_seconds_count", "vllm:time_to_first_token_seconds_count",
                     "sglang:time_to_first_token_seconds_count"},
           s.ttft_count);
    add_if(name, v, {"servelab:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_sum",
                     "sglang:time_to_first_token_seconds_sum"},
           s.ttft_sum_s);
    add_if(name, v, {"servelab:spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts_total"}, s.spec_drafts);
    add_if(name, v, {"servelab:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_draft_tokens_total"},
           s.spec_draft_tokens);
    add_if(name, v, {"servelab:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"},
           s.spec_accepted_tokens);
    if ((name == "servelab:spec_decode_num_accepted_tokens_per_pos_total" ||
         name == "vllm:spec_decode_num_accepted_tokens_per_pos_total") &&
        line[name_end] == '{') {
      const std::string labels = line.substr(name_end + 1, line.find('}', name_end) - name_end - 1);
      const size_t at = labels.find("position=\"");
      if (at == std::string::npos || (at > 0 && labels[at - 1] != ',')) continue;
      size_t used = 0;
      long pos = -1;
      try {
        pos = std::stol(labels.substr(at + 10), &used);
      } catch (const std::exception&) {
        continue;
      }
      if (pos < 0 || pos >= 64 || labels.compare(at + 10 + used, 1, "\"") != 0) continue;  // k <= 64 in any engine
      if (s.spec_accepted_per_pos.size() <= size_t(pos)) s.spec_accepted_per_pos.resize(size_t(pos) + 1, 0.0);
      s.spec_accepted_per_pos[size_t(pos)] += v;
    }
  }
  return s;
}

std::string server_sample_line(const std::string& run, const std::string& url, double t_s, const ServerSample& s) {
  nlohmann::ordered_json j;
  j["run"] = run;
  j["url"] = url;
  j["t_s"] = t_s;
  if (!s.engine.empty()) j["engine"] = s.engine;
  auto put = [&](const char* key, const std::optional<double>& v) {
    if (v) j[key] = *v;
  };
  put("running", s.running);
  put("waiting", s.waiting);
  put("kv_usage", s.kv_usage);
  put("preemptions", s.preemptions);
  put("ttft_count", s.ttft_count);
  put("ttft_sum_s", s.ttft_sum_s);
  put("spec_drafts", s.spec_drafts);
  put("spec_draft_tokens", s.spec_draft_tokens);
  put("spec_accepted_tokens", s.spec_accepted_tokens);
  if (!s.spec_accepted_per_pos.empty()) j["spec_accepted_per_pos"] = s.spec_accepted_per_pos;
  return j.dump() + "\n";
}

MetricsScraper::MetricsScraper(const TargetSpec& target, std::string run_label, std::string path,
                               std::chrono::steady_clock::time_point t0, double period_s)
    : target_(target), run_(std::move(run_label)), path_(std::move(path)), t0_(t0), period_s_(period_s) {
  for (const auto& u : target_.urls) endpoints_.push_back(parse_endpoint(u));
  live_.assign(endpoints_.size(), true);
  answered_.assign(endpoints_.size(), false);
  out_.open(path_, std::ios::app);
  scrape_all();  // before the run's first request: the counters' starting point
  thread_ = std::thread([this] { loop(); });
}

MetricsScraper::~MetricsScraper() { stop(); }

void MetricsScraper::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  scrape_all();  // after the run's last answer: the counters' end point
}

void MetricsScraper::scrape_all() {
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (!live_[i]) continue;
    const HttpReply r = http_exchange(endpoints_[i], "/metrics", "", target_.headers, period_s_ * 4);
    if (r.status != 200) {
      if (!answered_[i]) live_[i] = false;  // no /metrics: not asked again
      continue;
    }
    answered_[i] = true;
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    out_ << server_sample_line(run_, target_.urls[i], t, parse_server_metrics(r.body));
    out_.flush();
    ++n_samples_;
  }
}

void MetricsScraper::loop() {
  auto next = std::chrono::steady_clock::now();
  for (;;) {
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(period_s_));
    {
      std::unique_lock lock(mu_);
      if (cv_.wait_until(lock, next, [this] { return stopping_; })) return;
    }
    scrape_all();
  }
}

}  // namespace servelab::http_load
