#include "server/engine_service.h"

#include <stdexcept>
#include <string>

#include "engine/lora/lora_adapter.h"
#include "server/api_error.h"

namespace servelab::server {

void EngineServiceOptions::validate() const {
  if (max_waiting < 0)
    throw std::invalid_argument("max_waiting must be >= 0 (got " + std::to_string(max_waiting) + ")");
}

EngineService::EngineService(std::unique_ptr<Engine> engine, ServerMetrics& metrics, EngineServiceOptions options)
    : engine_(std::move(engine)), metrics_(metrics), options_(options), t0_(std::chrono::steady_clock::now()) {
  options_.validate();
  model_ = engine_->backend().config();
  max_model_len_ = engine_->config().kv.max_model_len;
  const SchedulerConfig& sc = engine_->config().sched;
  batch_slots_ = sc.kind == BatchingKind::continuous ? sc.max_num_seqs
                 : sc.kind == BatchingKind::static_batch ? sc.batch_size
                                                         : sc.max_batch_size;
  if (max_model_len_ <= 0 || max_model_len_ > model_.max_position) max_model_len_ = model_.max_position;
  thread_ = std::thread([this] { loop(); });
}

EngineService::~EngineService() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

double EngineService::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void EngineService::submit(const Request& request, std::shared_ptr<RequestChannel> channel) {
  {
    std::lock_guard lock(mu_);
    if (draining_ || stop_) {
      metrics_.on_rejected("draining");
      throw ApiError(503, "server_error", "", "draining", "the server is shutting down");
    }
    // Beyond what one batch runs, at most max_waiting requests wait: the queue (and memory) stay bounded.
    if (n_in_flight_.load() >= batch_slots_ + options_.max_waiting) {
      metrics_.on_rejected("queue_full");
      throw ApiError(429, "rate_limit_error", "", "queue_full",
                     "the waiting queue is full (" + std::to_string(options_.max_waiting) + " requests); retry later");
    }
    ++n_in_flight_;
    inbox_.push_back({request, std::move(channel)});
  }
  cv_.notify_one();
}

void EngineService::abort(uint64_t request_id) {
  {
    std::lock_guard lock(mu_);
    aborts_.emplace_back(request_id, false);
  }
  cv_.notify_one();
}

void EngineService::finish_early(uint64_t request_id) {
  {
    std::lock_guard lock(mu_);
    aborts_.emplace_back(request_id, true);
  }
  cv_.notify_one();
}

void EngineService::start_draining() {
  std::lock_guard lock(mu_);
  draining_ = true;
}

void EngineService::check_idle_clean() const {
  std::lock_guard lock(engine_mu_);
  if (engine_->has_work()) throw std::logic_error("engine still has requests in flight");
  engine_->check_invariants();
  const KvManager& kv = engine_->kv();
  if (kv.free_slots() != kv.capacity_slots())
    throw std::logic_error("KV leak: " + std::to_string(kv.capacity_slots() - kv.free_slots()) + " of " +
                           std::to_string(kv.capacity_slots()) + " slots still held with no request in flight");
}

void EngineService::finish(FinishedRequest f, std::span<const std::pair<int, TokenId>> last_tokens) {
  auto it = live_.find(f.request_id);
  if (it == live_.end()) return;
  Live live = std::move(it->second);
  live_.erase(it);
  FinishedTimings t;
  const double t_arrival = live.submitted_s;
  t.ttft_s = f.first_token_s >= 0 ? f.first_token_s - t_arrival : -1.0;
  for (double x : f.token_times_s) t.token_times_s.push_back(x - t_arrival);
  t.e2e_s = (f.end_s >= 0 ? f.end_s : now()) - t_arrival;
  t.n_prompt = f.n_prompt;
  t.lora = std::move(live.lora);
  for (const auto& o : f.outputs) t.n_output += static_cast<int>(o.size());
  switch (f.reason) {
    case FinishReason::length: t.finished_reason = "length"; break;
    case FinishReason::eos: t.finished_reason = "stop"; break;
    case FinishReason::aborted: t.finished_reason = live.stopped_early ? "stop" : "abort"; break;
    default: t.finished_reason = "error"; break;
  }
  metrics_.on_finished(t);
  --n_in_flight_;
  live.channel->push(last_tokens, std::move(f));  // one push: the session sees the last tokens with the end
}

void EngineService::publish_lora_requests() {
  const LoraConfig& lora = engine_->config().lora;
  if (!lora.enabled) return;
  Engine::LoraRequests r = engine_->lora_requests();
  metrics_.set_lora_requests(std::move(r.running), std::move(r.waiting), lora.max_loras);
}

void EngineService::deliver(const StepOutcome& out) {
  // One push per request per step: its tokens, and its end when it finished in this step.
  std::unordered_map<uint64_t, std::vector<std::pair<int, TokenId>>> by_request;
  for (const TokenEvent& t : out.tokens) by_request[t.request_id].emplace_back(t.sample_index, t.token);
  std::unordered_map<uint64_t, const FinishedRequest*> ended;
  for (const FinishedRequest& f : out.finished) ended[f.request_id] = &f;
  for (auto& [id, toks] : by_request) {
    if (ended.count(id)) continue;
    auto it = live_.find(id);
    if (it != live_.end()) it->second.channel->push(toks);
  }
  for (const FinishedRequest& f : out.finished) {
    auto it = live_.find(f.request_id);
    if (it == live_.end()) continue;
    auto toks = by_request.find(f.request_id);
    if (toks != by_request.end()) finish(f, toks->second);
    else finish(f);
  }
  if (!out.preempted.empty()) metrics_.add_preemptions(out.preempted.size());
  if (out.spec_drafts > 0)
    metrics_.add_spec_decode(out.spec_drafts, out.spec_draft_tokens, out.spec_accepted_tokens, out.spec_accepted_per_pos);
}

void EngineService::loop() {
  std::unique_lock lock(mu_);
  std::optional<double> wake_at;
  bool busy = false;  // the last step ran something: step again at once
  while (true) {
    if (inbox_.empty() && aborts_.empty() && !busy) {
      if (stop_) break;
      if (wake_at) {
        cv_.wait_until(lock, t0_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       std::chrono::duration<double>(*wake_at)));
        wake_at.reset();
        busy = true;  // the policy timer may have fired
      } else {
        cv_.wait(lock);
      }
      continue;
    }
    std::vector<Pending> inbox = std::move(inbox_);
    inbox_.clear();
    std::vector<std::pair<uint64_t, bool>> aborts = std::move(aborts_);
    aborts_.clear();
    const bool stopping = stop_;
    lock.unlock();
    {
      std::lock_guard elock(engine_mu_);
      for (auto& [id, early] : aborts) {
        auto it = live_.find(id);
        if (it == live_.end()) continue;
        it->second.stopped_early = early;
        if (auto f = engine_->abort(id, now(), early ? "stop string matched" : "client disconnected")) finish(std::move(*f));
      }
      for (Pending& p : inbox) {
        const double t = now();
        live_[p.request.id] = Live{p.channel, t, false, p.request.lora ? p.request.lora->name : std::string()};
        if (auto rejected = engine_->add(p.request, t)) finish(std::move(*rejected));
      }
      if (stopping) {
        for (FinishedRequest& f : engine_->abort_all(now())) finish(std::move(f));
        n_running_ = 0;
      }
      busy = false;
      if (engine_->has_work()) {
        const double t = now();
        StepOutcome out = engine_->step(t);
        if (!out.idle() && options_.pace_predicted) {
          const double until = t + out.duration_s;
          while (now() < until) std::this_thread::sleep_for(std::chrono::duration<double>(until - now()));
        }
        // Gauges first: a client that sees its request end must see the metrics after it.
        n_running_ = out.n_running;
        const double kv_usage =
            out.kv.capacity > 0 ? static_cast<double>(out.kv.capacity - out.kv.free - out.kv.external_frag) / out.kv.capacity : 0.0;
        metrics_.set_gauges(out.n_running, out.n_waiting, kv_usage);
        publish_lora_requests();
        deliver(out);
        busy = !out.idle() || !out.preempted.empty();
        if (!busy) wake_at = engine_->next_wakeup();
      } else {
        n_running_ = 0;
        metrics_.set_gauges(0, 0, 0.0);
        publish_lora_requests();
      }
    }
    lock.lock();
    if (stopping && !busy && inbox_.empty()) break;
  }
}

}  // namespace servelab::server
