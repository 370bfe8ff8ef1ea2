#pragma once
// Helpers for the engine and scheduler tests: a micro model, request lists, an open-loop source
// over a fixed list, and a run on the virtual clock that checks KV invariants after every step.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/backend/forwarding_backend.h"
#include "engine/backend/sim_backend.h"
#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/runner.h"

namespace servelab::enginetest {

/// hidden 64, 2 layers, 4 heads over 2 KV heads, ffn 128, vocab 256: fast on the CPU.
inline ModelConfig micro_model() {
  ModelConfig c;
  c.name = "micro";
  c.hidden_size = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.intermediate_size = 128;
  c.vocab_size = 256;
  c.max_position = 256;
  c.dtype = DType::f32;
  c.eos_token = 1;
  return c;
}

/// Prompt tokens in [2, 250), a pure function of (salt, index).
inline std::vector<TokenId> prompt_tokens(int n, uint64_t salt) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    uint64_t x = salt * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i) * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    t[static_cast<size_t>(i)] = static_cast<TokenId>(2 + x % 248);
  }
  return t;
}

inline Request make_request(uint64_t id, int n_prompt, int max_tokens, uint64_t salt = 0) {
  Request r;
  r.id = id;
  r.prompt = prompt_tokens(n_prompt, salt ? salt : id + 1);
  r.sampling.max_tokens = max_tokens;
  r.sampling.seed = 1000 + id;
  return r;
}

struct Timed {
  double time_s = 0.0;
  Request request;
};

/// Open-loop source over a fixed list (sorted by time).
class ListSource final : public RequestSource {
 public:
  explicit ListSource(std::vector<Timed> items) : items_(std::move(items)) {
    std::stable_sort(items_.begin(), items_.end(), [](const Timed& a, const Timed& b) { return a.time_s < b.time_s; });
  }
  std::optional<double> next_time() const override {
    if (next_ >= items_.size()) return std::nullopt;
    return items_[next_].time_s;
  }
  Request take() override { return items_[next_++].request; }
  bool exhausted() const override { return next_ >= items_.size(); }

 private:
  std::vector<Timed> items_;
  size_t next_ = 0;
};

struct RunResult {
  std::map<uint64_t, FinishedRequest> finished;
  std::map<uint64_t, double> intended;
  std::map<uint64_t, double> sent;
  std::vector<StepOutcome> steps;
  int n_tokens_delivered = 0;

  int n_preemptions() const {
    int n = 0;
    for (const auto& s : steps) n += static_cast<int>(s.preempted.size());
    return n;
  }
  const FinishedRequest& at(uint64_t id) const { return finished.at(id); }
};

/// Runs every request through `engine` on a virtual clock, checking KV invariants after every step.
inline RunResult run_virtual(Engine& engine, std::vector<Timed> items) {
  RunResult r;
  VirtualClock clock;
  ListSource source(std::move(items));
  RunnerCallbacks cb;
  cb.on_sent = [&](const Request& q, double intended, double sent) {
    r.intended[q.id] = intended;
    r.sent[q.id] = sent;
  };
  cb.on_step = [&](const StepOutcome& s) {
    engine.check_invariants();
    r.steps.push_back(s);
  };
  cb.on_token = [&](const TokenEvent&) { ++r.n_tokens_delivered; };
  cb.on_finished = [&](const FinishedRequest& f) { r.finished[f.request_id] = f; };
  run_engine(engine, source, clock, cb);
  return r;
}

/// All at time 0.
inline std::vector<Timed> at_zero(const std::vector<Request>& requests) {
  std::vector<Timed> out;
  for (const auto& q : requests) out.push_back({0.0, q});
  return out;
}

inline EngineConfig paged_config(SchedulerConfig sched, int64_t kv_cache_bytes, int block_size = 16) {
  EngineConfig c;
  c.sched = sched;
  c.kv.kind = KvKind::paged;
  c.kv.block_size = block_size;
  c.kv_cache_bytes = kv_cache_bytes;
  return c;
}

inline std::unique_ptr<Backend> sim_backend(const ModelConfig& model = micro_model(),
                                            const std::string& device = "h100") {
  return std::make_unique<SimBackend>(model, SimCostModel::roofline(SimDevice::preset(device)));
}

/// A SimBackend that records what the engine asked it to reserve and reports `buckets` as its
/// decode row buckets.
class ReservingBackend final : public ForwardingBackend {
 public:
  explicit ReservingBackend(std::vector<StepLimits>& seen, std::vector<int> buckets = {})
      : ForwardingBackend(sim_backend()), seen_(seen), buckets_(std::move(buckets)) {}
  void reserve_steps(const StepLimits& limits) override { seen_.push_back(limits); }
  std::vector<int> decode_row_buckets() const override { return buckets_; }

 private:
  std::vector<StepLimits>& seen_;
  std::vector<int> buckets_;
};

inline SchedulerConfig static_sched(int batch_size, double max_wait_ms) {
  SchedulerConfig s;
  s.kind = BatchingKind::static_batch;
  s.batch_size = batch_size;
  s.max_wait_ms = max_wait_ms;
  return s;
}

inline SchedulerConfig dynamic_sched(int max_batch_size, double max_queue_delay_ms) {
  SchedulerConfig s;
  s.kind = BatchingKind::dynamic_batch;
  s.max_batch_size = max_batch_size;
  s.max_queue_delay_ms = max_queue_delay_ms;
  return s;
}

inline SchedulerConfig continuous_sched(int max_num_seqs, int max_num_batched_tokens, bool chunked,
                                        PreemptMode preempt = PreemptMode::recompute) {
  SchedulerConfig s;
  s.kind = BatchingKind::continuous;
  s.max_num_seqs = max_num_seqs;
  s.max_num_batched_tokens = max_num_batched_tokens;
  s.chunked_prefill = chunked;
  s.preempt = preempt;
  return s;
}

}  // namespace servelab::enginetest
