// Engine::step reads like nano-vllm's: schedule -> move KV (swaps, copy-on-write) -> run the
// backend (which samples) -> append tokens and stamp times -> fork parallel samples -> retire.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <unordered_map>

#include "engine/sched/scheduler.h"

namespace servelab {

void EngineConfig::validate() const {
  sched.validate();
  kv.validate();
  if (kv_cache_bytes <= 0)
    throw std::invalid_argument("engine.kv_cache_bytes must be > 0 (got " + std::to_string(kv_cache_bytes) + ")");
}

namespace {

/// A request in flight: its sequences (sample 0 first; the other samples are forked from it
/// once its prefill is done) and the record handed back when all of them are finished.
struct RequestState {
  Request request;
  std::vector<std::unique_ptr<Sequence>> seqs;
  FinishedRequest record;
  bool forked = false;

  bool complete() const {
    if (request.sampling.n > 1 && !forked) return false;
    return std::all_of(seqs.begin(), seqs.end(),
                       [](const auto& s) { return s->status == SeqStatus::finished; });
  }
};

std::string slots_text(int64_t n_slots, int64_t per_slot) {
  return std::to_string(n_slots) + " token slots of " + std::to_string(per_slot) + " bytes";
}

}  // namespace

struct Engine::State {
  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests;
  uint64_t next_seq_id = 1;

  RequestState& of(const Sequence& s) { return *requests.at(s.request_id); }
  /// Sample 0 has its first token: samples 1..n-1 start from its prompt, sharing its K/V.
  void fork_samples(Sequence& parent, KvManager& kv, Scheduler& scheduler);
  /// seq is done: frees its KV; when its request has no sample left, the record goes to `out`.
  void retire(Sequence& seq, FinishReason reason, double end, KvManager& kv, Scheduler& scheduler,
              StepOutcome& out);
};

Engine::Engine(const EngineConfig& config, std::unique_ptr<Backend> backend)
    : config_(config), backend_(std::move(backend)), state_(std::make_unique<State>()) {
  if (!backend_) throw std::invalid_argument("Engine needs a backend (got none)");
  config_.validate();
  const ModelConfig& model = backend_->config();
  // The KV manager's notion of the longest sequence cannot exceed the model's.
  config_.kv.max_model_len = std::min(config_.kv.max_model_len, model.max_position);

  const int64_t per_slot = backend_->kv_bytes_per_slot();
  if (per_slot <= 0)
    throw std::logic_error("backend " + backend_->name() + " reports kv_bytes_per_slot " + std::to_string(per_slot));
  const int64_t n_slots = config_.kv_cache_bytes / per_slot;
  int64_t min_slots = 1;
  std::string unit = "one token";
  if (config_.kv.kind == KvKind::paged) {
    min_slots = config_.kv.block_size;
    unit = "one block of kv.block_size = " + std::to_string(config_.kv.block_size) + " tokens";
  } else if (config_.kv.reserve == NaiveReserve::max) {
    min_slots = config_.kv.max_model_len;
    unit = "one request's reservation of max_model_len = " + std::to_string(min_slots) + " tokens";
  }
  if (n_slots < min_slots)
    throw std::invalid_argument(
        "engine.kv_cache_bytes = " + std::to_string(config_.kv_cache_bytes) + " holds " +
        slots_text(n_slots, per_slot) + " (model " + model.name + "), too small for " + unit +
        ": it must be >= " + std::to_string(min_slots * per_slot));

  kv_ = make_kv_manager(config_.kv, n_slots);
  backend_->init_kv(n_slots);
  scheduler_ = make_scheduler(config_.sched, *kv_);
}

Engine::~Engine() = default;

std::optional<FinishedRequest> Engine::add(const Request& request, double now) {
  const SamplingParams& sp = request.sampling;
  auto reject = [&](const std::string& why) {
    FinishedRequest f;
    f.request_id = request.id;
    f.reason = FinishReason::rejected;
    f.error = why;
    f.arrival_s = now;
    f.end_s = now;
    f.n_prompt = static_cast<int>(request.prompt.size());
    f.outputs.resize(std::max(1, sp.n));
    return f;
  };
  const int n_prompt = static_cast<int>(request.prompt.size());
  const int max_len = config_.kv.max_model_len;
  const int vocab = backend_->config().vocab_size;
  if (state_->requests.count(request.id))
    return reject("request id " + std::to_string(request.id) + " is already in flight");
  if (n_prompt == 0) return reject("empty prompt: a request needs at least one token");
  if (sp.max_tokens < 1) return reject("max_tokens must be >= 1 (got " + std::to_string(sp.max_tokens) + ")");
  if (sp.n < 1) return reject("n must be >= 1 (got " + std::to_string(sp.n) + ")");
  if (!(sp.temperature >= 0.0f)) return reject("temperature must be >= 0 (got " + std::to_string(sp.temperature) + ")");
  if (sp.top_k < 0) return reject("top_k must be >= 0 (got " + std::to_string(sp.top_k) + ")");
  if (!(sp.top_p > 0.0f && sp.top_p <= 1.0f))
    return reject("top_p must be in (0, 1] (got " + std::to_string(sp.top_p) + ")");
  for (int i = 0; i < n_prompt; ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab)
      return reject("prompt token " + std::to_string(request.prompt[i]) + " at index " + std::to_string(i) +
                    " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  if (static_cast<int64_t>(n_prompt) + sp.max_tokens > max_len)
    return reject("prompt (" + std::to_string(n_prompt) + " tokens) + max_tokens (" + std::to_string(sp.max_tokens) +
                  ") exceeds the max model length " + std::to_string(max_len));

  auto rs = std::make_unique<RequestState>();
  rs->request = request;
  auto seq = std::make_unique<Sequence>();
  seq->id = state_->next_seq_id++;
  seq->request_id = request.id;
  seq->tokens = request.prompt;
  seq->n_prompt = n_prompt;
  seq->sampling = sp;
  seq->arrival_s = now;
  if (auto why = scheduler_->never_schedulable(*seq)) return reject(*why);

  rs->record.request_id = request.id;
  rs->record.arrival_s = now;
  rs->record.n_prompt = n_prompt;
  rs->record.outputs.resize(sp.n);
  scheduler_->add(seq.get());
  rs->seqs.push_back(std::move(seq));
  state_->requests.emplace(request.id, std::move(rs));
  return std::nullopt;
}

namespace {

/// Carries out the KV moves a schedule asked for, in the only safe order: swap-outs read slots
/// that were just released (before anything reuses them), copy-on-write copies, then swap-ins.
void move_kv(const ScheduledStep& plan, KvManager& kv, Backend& backend) {
  for (const SwapTransfer& t : plan.swap_out) backend.save_slots(t.slots, t.seq->swapped_kv);
  const std::vector<KvCopy> copies = kv.take_pending_copies();
  if (!copies.empty()) backend.copy_slots(copies);
  for (const SwapTransfer& t : plan.swap_in) {
    // The prefix cache may have handed back shared slots: their bytes must stay exactly as the
    // other holders see them, so they are put back after the bulk load.
    const std::span<const int64_t> shared(t.slots.data(), static_cast<size_t>(t.n_shared_prefix));
    std::vector<std::byte> keep;
    if (!shared.empty()) backend.save_slots(shared, keep);
    backend.load_slots(t.slots, t.seq->swapped_kv);
    if (!shared.empty()) backend.load_slots(shared, keep);
    std::vector<std::byte>().swap(t.seq->swapped_kv);
  }
}

}  // namespace

StepOutcome Engine::step(double now) {
  StepOutcome out;
  out.start_s = now;
  const auto t0 = std::chrono::steady_clock::now();
  ScheduledStep plan = scheduler_->schedule(now);
  for (const Sequence* s : plan.preempted) out.preempted.push_back(s->request_id);
  move_kv(plan, *kv_, *backend_);

  if (!plan.empty()) {
    Batch batch;
    batch.n_padding_tokens = plan.n_padding_tokens;
    size_t n_sample = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      const bool sample = c.seq->n_computed + c.n_new == c.seq->n_tokens();
      batch.entries.push_back({c.seq, c.n_new, sample});
      n_sample += sample;
      FinishedRequest& rec = state_->of(*c.seq).record;
      if (rec.scheduled_s < 0) rec.scheduled_s = now;
    }
    ForwardResult result = backend_->forward(batch, *kv_);
    const double measured = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.duration_s = result.predicted_s.value_or(measured);
    if (result.sampled.size() != n_sample)
      throw std::logic_error("backend " + backend_->name() + " returned " + std::to_string(result.sampled.size()) +
                             " tokens for " + std::to_string(n_sample) + " sampled entries");
    const double end = now + out.duration_s;
    const int eos = backend_->config().eos_token;

    std::vector<std::pair<Sequence*, FinishReason>> done;
    std::vector<Sequence*> to_fork;
    size_t k = 0;
    for (const BatchEntry& e : batch.entries) {
      Sequence& s = *e.seq;
      s.n_computed += e.n_new;
      kv_->on_computed(s);
      if (!e.sample) continue;
      const TokenId tok = result.sampled[k++];
      s.tokens.push_back(tok);
      RequestState& rs = state_->of(s);
      rs.record.outputs[s.sample_index].push_back(tok);
      out.tokens.push_back({s.request_id, s.sample_index, tok, end});
      if (s.sample_index == 0) {
        if (rs.record.first_token_s < 0) rs.record.first_token_s = end;
        rs.record.token_times_s.push_back(end);
        if (rs.request.sampling.n > 1 && !rs.forked) to_fork.push_back(&s);
      }
      if (s.n_output() >= s.sampling.max_tokens) done.emplace_back(&s, FinishReason::length);
      else if (!s.sampling.ignore_eos && eos >= 0 && tok == eos) done.emplace_back(&s, FinishReason::eos);
    }
    for (Sequence* parent : to_fork) state_->fork_samples(*parent, *kv_, *scheduler_);
    for (auto& [s, reason] : done) state_->retire(*s, reason, end, *kv_, *scheduler_, out);

    out.batch_size = static_cast<int>(batch.entries.size());
    out.n_tokens = batch.n_tokens();
    out.n_padding_tokens = batch.n_padding_tokens;
  }
  const std::vector<const Sequence*> live = scheduler_->live();
  out.kv = kv_->breakdown(live);
  out.n_waiting = scheduler_->n_waiting();
  out.n_running = scheduler_->n_running();
  return out;
}

void Engine::State::fork_samples(Sequence& parent, KvManager& kv, Scheduler& scheduler) {
  RequestState& rs = of(parent);
  rs.forked = true;
  for (int i = 1; i < rs.request.sampling.n; ++i) {
    auto child = std::make_unique<Sequence>();
    child->id = next_seq_id++;
    child->request_id = parent.request_id;
    child->sample_index = i;
    child->tokens.assign(parent.tokens.begin(), parent.tokens.begin() + parent.n_prompt);
    child->n_prompt = parent.n_prompt;
    child->sampling = parent.sampling;
    child->arrival_s = parent.arrival_s;
    // The child shares the prompt's K/V and recomputes only the last prompt position, which
    // gives it its own logits (the sampler's draws differ by sample index). A naive manager
    // cannot share a region: its fork reserves the child a region of its own, and when none is
    // free the child waits and computes its prompt itself.
    if (kv.kind() == KvKind::naive && !kv.can_allocate(*child, child->n_tokens())) {
      child->n_computed = 0;
    } else {
      child->n_computed = parent.n_prompt - 1;
      kv.fork(parent, *child);
    }
    scheduler.add_forked(child.get(), parent);
    rs.seqs.push_back(std::move(child));
  }
}

void Engine::State::retire(Sequence& seq, FinishReason reason, double end, KvManager& kv,
                           Scheduler& scheduler, StepOutcome& out) {
  kv.release(seq);
  scheduler.on_finished(&seq);
  seq.status = SeqStatus::finished;
  RequestState& rs = of(seq);
  if (seq.sample_index == 0) rs.record.reason = reason;
  if (!rs.complete()) return;
  FinishedRequest rec = std::move(rs.record);
  rec.end_s = end;
  rec.n_output = rs.seqs.front()->n_output();
  for (const auto& s : rs.seqs) rec.preemptions += s->preemptions;
  out.finished.push_back(std::move(rec));
  requests.erase(seq.request_id);
}

std::vector<FinishedRequest> Engine::abort_all(double now) {
  std::vector<FinishedRequest> out;
  for (auto& [id, rs] : state_->requests) {
    for (auto& s : rs->seqs) kv_->release(*s);
    FinishedRequest rec = std::move(rs->record);
    rec.reason = FinishReason::aborted;
    rec.error = "aborted before it finished (run stopped)";
    rec.end_s = now;
    rec.n_output = rs->seqs.front()->n_output();
    for (const auto& s : rs->seqs) rec.preemptions += s->preemptions;
    out.push_back(std::move(rec));
  }
  scheduler_->clear();
  state_->requests.clear();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.request_id < b.request_id; });
  return out;
}

std::optional<FinishedRequest> Engine::abort(uint64_t request_id, double now, const std::string& why) {
  auto it = state_->requests.find(request_id);
  if (it == state_->requests.end()) return std::nullopt;
  RequestState& rs = *it->second;
  for (auto& s : rs.seqs) {
    if (s->status == SeqStatus::finished) continue;
    kv_->release(*s);
    scheduler_->remove(s.get());
  }
  FinishedRequest rec = std::move(rs.record);
  rec.reason = FinishReason::aborted;
  rec.error = why;
  rec.end_s = now;
  rec.n_output = rs.seqs.front()->n_output();
  for (const auto& s : rs.seqs) rec.preemptions += s->preemptions;
  state_->requests.erase(it);
  return rec;
}

bool Engine::has_work() const { return !state_->requests.empty(); }

std::optional<double> Engine::next_wakeup() const { return scheduler_->next_wakeup(); }

void Engine::check_invariants() const { kv_->check_invariants(scheduler_->live()); }

}  // namespace servelab
