// A request's life after the scheduler picked it: each drawn token appended and stamped, a
// request's parallel samples forked from its prefill, finished samples retired (KV freed, the
// record completed), and requests aborted or rejected from outside the step.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/engine.h"
#include "engine/engine_state.h"
#include "engine/lora/lora_adapter.h"
#include "engine/lora/lora_slots.h"
#include "engine/sched/scheduler.h"

namespace servelab {

void Engine::State::append(EngineSequence& s, TokenId tok, double end, int eos,
                           std::vector<std::pair<Sequence*, FinishReason>>& done) {
  std::vector<double>& times = s.token_times;
  if (s.first_token_s < 0.0) {
    // The first token: make room for the rest now, so decoding appends without reallocating (a
    // doubling series of two vectors per sample otherwise). Not on arrival: a long queue of
    // waiting requests would hold it for nothing.
    s.first_token_s = end;
    const auto expect = static_cast<size_t>(std::clamp(s.sampling.max_tokens, 1, kReservedOutputTokens));
    if (token_times) times.reserve(expect);
    s.tokens.reserve(s.tokens.size() + expect);
  }
  s.tokens.push_back(tok);
  if (s.constrained) s.request->request.constraint->accept(tok);
  if (token_times) times.push_back(end);
  if (s.n_output() >= s.sampling.max_tokens) done.emplace_back(&s, FinishReason::length);
  else if (!s.sampling.ignore_eos && eos >= 0 && tok == eos) done.emplace_back(&s, FinishReason::eos);
}

void Engine::State::jump_forward(EngineSequence& s, double end, int eos, int vocab, StepOutcome& out) {
  const int room = s.sampling.max_tokens - s.n_output();
  TokenConstraint* constraint = s.request->request.constraint.get();
  if (room < 1 || !constraint) return;
  const std::vector<TokenId> forced = constraint->forced_tokens(room);
  const size_t n_done = done.size();
  for (TokenId t : forced) {
    if (t < 0 || t >= vocab || done.size() != n_done) break;
    emit(s, t, end, eos, out, done);
    ++out.n_jump_forward_tokens;
  }
}

void Engine::State::fork_samples(EngineSequence& parent, std::span<const TokenId> firsts, double end, int eos,
                                 KvManager& kv, Scheduler& scheduler, StepOutcome& out,
                                 std::vector<std::pair<Sequence*, FinishReason>>& done) {
  RequestState& rs = of(parent);
  rs.forked = true;
  parent.n_first_draws = 1;
  const int n = rs.request.sampling.n;
  if (static_cast<int>(firsts.size()) != n)
    throw std::logic_error("engine: " + std::to_string(firsts.size()) + " first tokens for " + std::to_string(n) +
                           " parallel samples of request " + std::to_string(parent.request_id));
  for (int i = 1; i < n; ++i) {
    auto owned = std::make_unique<EngineSequence>();
    EngineSequence& child = *owned;
    child.request = &rs;
    child.id = next_seq_id++;
    child.request_id = parent.request_id;
    child.sample_index = i;
    child.tokens.assign(parent.tokens.begin(), parent.tokens.begin() + parent.n_prompt);
    child.n_prompt = parent.n_prompt;
    child.sampling = parent.sampling;
    child.arrival_s = parent.arrival_s;
    child.cache_salt = parent.cache_salt;  // its blocks join the prefix cache under the parent's keys
    child.lora = parent.lora;
    child.lora_id = parent.lora_id;
    child.constrained = parent.constrained;
    child.stamped = true;  // the record's scheduled_s came with the parent's prefill
    rs.seqs.push_back(std::move(owned));
    const size_t n_done = done.size();
    emit(child, firsts[static_cast<size_t>(i)], end, eos, out, done);
    if (done.size() > n_done) continue;  // its first token was its last: it never runs
    // The child's K/V up to n_prompt is the parent's prompt K/V; its own first token is computed
    // by its first decode (a write into a shared block copies it first). A naive manager cannot
    // share a region: its fork reserves the child a region and copies the prompt's K/V, and when
    // no region is free the child waits and computes its prompt itself (n_computed 0).
    if (kv.kind() == KvKind::naive && !kv.can_allocate(child, child.n_tokens())) {
      child.n_computed = 0;
    } else {
      child.n_computed = parent.n_prompt;
      kv.fork(parent, child);
    }
    scheduler.add_forked(&child, parent);
  }
}

void Engine::State::retire(Sequence& seq, FinishReason reason, double end, KvManager& kv,
                           Scheduler& scheduler, StepOutcome& out) {
  kv.release(seq);
  scheduler.on_finished(&seq);
  seq.status = SeqStatus::finished;
  forget(seq);
  RequestState& rs = of(seq);
  if (seq.sample_index == 0) rs.record.reason = reason;
  if (!rs.complete()) return;
  rs.settle(token_times);
  FinishedRequest rec = std::move(rs.record);
  rec.end_s = end;
  for (const auto& s : rs.seqs) rec.preemptions += s->preemptions;
  out.finished.push_back(std::move(rec));
  requests.erase(seq.request_id);
}

std::vector<FinishedRequest> Engine::abort_all(double now) {
  std::vector<FinishedRequest> out;
  for (auto& [id, rs] : state_->requests) {
    for (auto& s : rs->seqs) release_kv(*s);
    rs->settle(state_->token_times);
    FinishedRequest rec = std::move(rs->record);
    rec.reason = FinishReason::aborted;
    rec.error = "aborted before it finished (run stopped)";
    rec.end_s = now;
    for (const auto& s : rs->seqs) rec.preemptions += s->preemptions;
    out.push_back(std::move(rec));
  }
  scheduler_->clear();
  state_->requests.clear();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.request_id < b.request_id; });
  return out;
}

std::optional<FinishedRequest> Engine::reject_blocked(double now, const std::string& why) {
  const Sequence* head = scheduler_->next_waiting();
  if (!head) return std::nullopt;
  const uint64_t id = head->request_id;
  RequestState& rs = *state_->requests.at(id);
  for (auto& s : rs.seqs) {
    scheduler_->remove(s.get());
    release_kv(*s);
    s->status = SeqStatus::finished;
  }
  rs.settle(state_->token_times);
  FinishedRequest rec = std::move(rs.record);
  rec.reason = FinishReason::rejected;
  rec.error = why;
  rec.end_s = now;
  for (const auto& s : rs.seqs) rec.preemptions += s->preemptions;
  state_->requests.erase(id);
  return rec;
}

std::optional<FinishedRequest> Engine::abort(uint64_t request_id, double now, const std::string& why) {
  auto it = state_->requests.find(request_id);
  if (it == state_->requests.end()) return std::nullopt;
  RequestState& rs = *it->second;
  for (auto& s : rs.seqs) {
    if (s->status == SeqStatus::finished) continue;
    release_kv(*s);
    scheduler_->remove(s.get());
  }
  rs.settle(state_->token_times);
  FinishedRequest rec = std::move(rs.record);
  rec.reason = FinishReason::aborted;
  rec.error = why;
  rec.end_s = now;
  for (const auto& s : rs.seqs) rec.preemptions += s->preemptions;
  state_->requests.erase(it);
  return rec;
}

Engine::LoraRequests Engine::lora_requests() const {
  LoraRequests out;
  for (const auto& [id, rs] : state_->requests) {
    const Request& r = rs->request;
    if (!r.lora) continue;
    const bool running = std::any_of(rs->seqs.begin(), rs->seqs.end(),
                                     [](const auto& s) { return s->status == SeqStatus::running; });
    (running ? out.running : out.waiting).push_back(r.lora->name);
  }
  for (std::vector<std::string>* v : {&out.running, &out.waiting}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  return out;
}

void Engine::release_kv(Sequence& seq) {
  state_->forget(seq);
  kv_->release(seq);
  if (swap_) swap_->release(seq);  // a swapped-out sequence leaves its host blocks too
}

}  // namespace servelab
