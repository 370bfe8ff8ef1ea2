#include "engine/sched/continuous_scheduler.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

namespace servelab {

ContinuousScheduler::ContinuousScheduler(const SchedulerConfig& config, KvManager& kv, SwapSpace* swap)
    : config_(config), kv_(kv), swap_(swap) {
  // Whole allocation units (blocks), rounded down as vLLM does: a small arena keeps none.
  const int64_t unit = std::max<int64_t>(1, kv.unit_slots());
  watermark_slots_ = static_cast<int64_t>(kWatermark * static_cast<double>(kv.capacity_slots() / unit)) * unit;
  config_.validate();
}

namespace {

/// A number no other pass of any scheduler has had: sequences stamped by an earlier pass (or by
/// another scheduler) never read as scheduled in this one.
uint64_t next_pass_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void ContinuousScheduler::Pass::add_chunk(Sequence* s, int n_new) {
  step.chunks.push_back({s, n_new});
  s->sched_pass = id;
  budget -= n_new;
}

void ContinuousScheduler::Pass::drop_chunk(Sequence* s) {
  if (!scheduled(s)) return;
  s->sched_pass = 0;
  for (auto it = step.chunks.begin(); it != step.chunks.end(); ++it)
    if (it->seq == s) {
      budget += it->n_new;
      step.chunks.erase(it);
      return;
    }
}

std::optional<std::string> ContinuousScheduler::never_schedulable(const Sequence& seq) const {
  if (!config_.chunked_prefill && seq.n_tokens() > config_.max_num_batched_tokens)
    return "prompt of " + std::to_string(seq.n_tokens()) + " tokens exceeds max_num_batched_tokens (" +
           std::to_string(config_.max_num_batched_tokens) +
           ") and chunked_prefill is off: enable chunked_prefill or raise max_num_batched_tokens";
  if (seats(seq) > config_.max_num_seqs)
    return "n = " + std::to_string(seq.sampling.n) + " parallel samples exceed max_num_seqs (" +
           std::to_string(config_.max_num_seqs) + ")";
  // What one sample needs alone in the arena, without prefix-cache hits: blocks cached now may
  // be evicted before it runs.
  const int64_t need = kv_.worst_case_slots(seq);
  if (need > kv_.capacity_slots())
    return "needs " + std::to_string(need) + " KV slots for " + std::to_string(seq.n_kv_final()) +
           " tokens but the whole arena holds " + std::to_string(kv_.capacity_slots()) +
           " (raise engine.kv_cache_bytes)";
  return std::nullopt;
}

void ContinuousScheduler::add(Sequence* seq) {
  seq->status = SeqStatus::waiting;
  waiting_.push_back(seq);
}

void ContinuousScheduler::add_forked(Sequence* child, const Sequence& parent) {
  all_drawing_ = false;
  if (!child->kv.allocated) {  // no room to fork now: it waits at the front, like a preempted one
    child->status = SeqStatus::waiting;
    waiting_.push_front(child);
    return;
  }
  child->status = SeqStatus::running;
  running_.push_back(child);  // newest: the first to go if KV runs short
}

int ContinuousScheduler::seats(const Sequence& seq) const {
  // A request's other samples are forked from sample 0 once it has its first token.
  const bool brings_forks = seq.sample_index == 0 && seq.n_output() == 0;
  return brings_forks ? std::max(1, seq.sampling.n) : 1;
}

std::vector<const Sequence*> ContinuousScheduler::live() const {
  return {running_.begin(), running_.end()};
}

bool ContinuousScheduler::hold(Sequence& seq, int n_tokens) {
  return kv_.allocate_slots(seq, n_tokens - seq.n_computed);
}

int ContinuousScheduler::fit_chunk(Sequence& seq, int want) {
  if (want <= 0) return 0;
  if (hold(seq, seq.n_computed + want)) return want;
  // can_grow is monotone in the length: bisect for the longest chunk that still fits.
  int lo = 0, hi = want;  // lo fits (0 trivially), hi does not
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    const int target = seq.n_computed + mid;
    if (kv_.slots_needed(seq, target) == 0 || kv_.can_grow(seq, target)) lo = mid;
    else hi = mid;
  }
  if (lo > 0 && !hold(seq, seq.n_computed + lo)) return 0;
  return lo;
}

void ContinuousScheduler::preempt(Sequence* victim, Pass& pass) {
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  pass.drop_chunk(victim);
  victim->spec_tokens.clear();  // drafts are proposed again once it runs
  ++victim->preemptions;
  pass.step.preempted.push_back(victim);
  const bool swap = config_.preempt == PreemptMode::swap && victim->n_computed > 0;
  if (swap && swap_ && swap_->can_hold(victim->n_computed)) {
    swap_->allocate(*victim, victim->n_computed);
    SwapTransfer out;
    out.seq = victim;
    swap_->runs(*victim, kv_, 0, victim->n_computed, out.runs);
    pass.step.swap_out.push_back(std::move(out));
    kv_.release(*victim);
    victim->status = SeqStatus::swapped;
    swapped_.push_back(victim);
  } else {
    if (swap) pass.step.swap_pool_full.push_back(victim);  // the host pool is full: recompute
    // Recompute: everything it has (prompt and output so far) is prefilled again on readmission.
    kv_.release(*victim);
    victim->n_computed = 0;
    victim->kv.n_cached_prefix = 0;
    victim->status = SeqStatus::waiting;
    waiting_.push_front(victim);
  }
}

bool ContinuousScheduler::catch_up_drawing(Sequence* s, Pass& pass) {
  // Its last accepted token and any drafts: 1 + k rows, all in this step or none. Short of budget
  // or KV, drafts go first (the step still makes its one token); then the newest sequences are
  // preempted, as a plain decode would.
  if (n_pending(*s) > pass.budget) s->spec_tokens.resize(static_cast<size_t>(std::max(0, pass.budget - 1)));
  while (!hold(*s, s->n_with_spec())) {
    if (!s->spec_tokens.empty()) {
      s->spec_tokens.clear();
      continue;
    }
    Sequence* victim = running_.back();  // newest first; it has not been scheduled yet
    preempt(victim, pass);
    if (victim == s) return false;
  }
  pass.add_chunk(s, n_pending(*s));
  return true;
}

void ContinuousScheduler::schedule_decodes(Pass& pass) {
  int prefilling = 0;  // running sequences passed over because they do not draw
  size_t i = 0;
  for (; i < running_.size(); ++i) {
    Sequence* s = running_[i];
    if (!drawing(*s)) {
      ++prefilling;
      continue;
    }
    if (pass.scheduled(s)) continue;
    if (pass.budget < 1) break;
    // A decode without drafts that fits the budget and holds (or gets) its slot: what
    // catch_up_drawing does on its first try, without the call (most running sequences, most
    // steps). A false hold changed nothing; catch_up_drawing then makes room.
    if (s->spec_tokens.empty() && n_pending(*s) <= pass.budget && hold(*s, s->n_tokens())) {
      pass.add_chunk(s, n_pending(*s));
      continue;
    }
    if (!catch_up_drawing(s, pass)) break;  // s was the newest: nothing behind it is left
  }
  // Every running sequence was seen and each draws: schedule_running_prefills would find nothing.
  pass.all_drawing = i == running_.size() && prefilling == 0;
}

void ContinuousScheduler::schedule_swap_ins(Pass& pass) {
  while (!swapped_.empty()) {
    Sequence* s = swapped_.front();
    if (static_cast<int>(running_.size()) + 1 > config_.max_num_seqs) break;
    const bool decoding = drawing(*s);
    if (decoding && pass.budget < 1) break;
    const int n_hold = decoding ? s->n_with_spec() : s->n_computed;
    if (!kv_.can_allocate(*s, n_hold)) break;
    kv_.allocate(*s, n_hold);
    SwapTransfer in;
    in.seq = s;
    // The prefix cache may have handed back shared blocks: they already hold these tokens' K/V
    // as the other holders see it, so only the rest comes back from the pool.
    const int n_shared = std::clamp(s->kv.n_cached_prefix, 0, s->n_computed);
    swap_->runs(*s, kv_, n_shared, s->n_computed, in.runs);
    pass.step.swap_in.push_back(std::move(in));
    pass.resumed.insert(s);
    s->status = SeqStatus::running;
    running_.push_back(s);
    swapped_.pop_front();
    if (decoding) pass.add_chunk(s, n_pending(*s));
  }
}

void ContinuousScheduler::schedule_running_prefills(Pass& pass) {
  // Nothing to prefill (the common step): no walk over the running sequences. A sequence swapped
  // in since may be mid-prefill.
  if (pass.all_drawing && pass.step.swap_in.empty()) return;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* s = running_[i];
    if (drawing(*s) || pass.scheduled(s)) continue;
    if (pass.budget < 1) break;
    const int want = std::min(n_pending(*s), pass.budget);
    int n = fit_chunk(*s, want);
    while (n == 0) {
      // Make room from the newest sequence behind s that is itself still prefilling and idle in
      // this step; without this, two half-prefilled sequences could block each other forever.
      Sequence* victim = nullptr;
      for (size_t j = running_.size(); j-- > i + 1;) {
        Sequence* c = running_[j];
        if (!drawing(*c) && !pass.scheduled(c) && !pass.resumed.count(c)) {
          victim = c;
          break;
        }
      }
      if (!victim) break;
      preempt(victim, pass);
      n = fit_chunk(*s, want);
    }
    if (n == 0) continue;
    pass.add_chunk(s, n);
  }
}

int ContinuousScheduler::admission_target(const Sequence& seq, int budget, int seats_taken, bool step_empty) const {
  if (budget < 1) return 0;
  if (seats_taken + seats(seq) > config_.max_num_seqs) return 0;
  const int n_tokens = seq.n_tokens();
  int n_target = 0;  // positions to hold on admission
  if (config_.chunked_prefill) {
    n_target = std::min(n_tokens, budget);
  } else if (n_tokens <= budget) {
    n_target = n_tokens;
  } else if (n_tokens > config_.max_num_batched_tokens && step_empty) {
    // Only a recompute-preempted sequence grows past the budget (add() rejects such prompts):
    // it is prefilled again in budget-sized pieces over consecutive prefill-only steps.
    n_target = n_tokens;
  } else {
    return 0;
  }
  if (!kv_.can_allocate(seq, n_target)) return 0;
  // Keep a watermark free for the running sequences' growth, or the next decode step would
  // preempt what was just admitted (admit-then-preempt thrash). Alone, nothing can thrash.
  if (!running_.empty() && kv_.free_slots() - kv_.slots_needed(seq, n_target) < watermark_slots_) return 0;
  return n_target;
}

bool ContinuousScheduler::admit(Sequence* seq, Pass& pass) {
  if (pass.budget < 1) return false;
  if (pass.seats_taken < 0) {
    pass.seats_taken = 0;
    for (const Sequence* r : running_) pass.seats_taken += seats(*r);
  }
  const int n_target = admission_target(*seq, pass.budget, pass.seats_taken, pass.step.chunks.empty());
  if (n_target == 0) return false;
  const int n_tokens = seq->n_tokens();
  kv_.allocate(*seq, n_target);
  seq->n_computed = std::clamp(seq->kv.n_cached_prefix, 0, n_tokens - 1);
  const int n = fit_chunk(*seq, std::min(n_tokens - seq->n_computed, pass.budget));
  if (n == 0) {
    kv_.release(*seq);
    seq->n_computed = 0;
    return false;
  }
  pass.seats_taken += seats(*seq);
  seq->status = SeqStatus::running;
  running_.push_back(seq);
  pass.add_chunk(seq, n);
  return true;
}

bool ContinuousScheduler::adapter_fits(const Sequence& seq, const std::unordered_set<uint64_t>& held) const {
  if (config_.max_loras <= 0 || seq.lora_id == 0) return true;
  return held.count(seq.lora_id) > 0 || static_cast<int>(held.size()) < config_.max_loras;
}

bool ContinuousScheduler::waits_for_adapter(const Sequence& seq, const std::unordered_set<uint64_t>& held,
                                            const Pass& pass) const {
  if (!config_.adapter_ready || seq.lora_id == 0 || held.count(seq.lora_id)) return false;
  if (pass.step.chunks.empty() && running_.empty()) return false;  // nothing else to run meanwhile
  if (pass.now - seq.arrival_s >= config_.adapter_ready_wait_s) return false;
  return !config_.adapter_ready(seq, pass.now);
}

void ContinuousScheduler::schedule_admissions(Pass& pass) {
  if (config_.max_loras <= 0) {
    while (!waiting_.empty() && admit(waiting_.front(), pass)) waiting_.pop_front();
    return;
  }
  // The adapter bound and its overtaking rule (continuous_scheduler.h).
  std::unordered_set<uint64_t> adapters;  // of running and swapped sequences
  for (const Sequence* r : running_)
    if (r->lora_id) adapters.insert(r->lora_id);
  for (const Sequence* r : swapped_)
    if (r->lora_id) adapters.insert(r->lora_id);
  const Sequence* held = nullptr;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Sequence* seq = *it;
    if (waits_for_adapter(*seq, adapters, pass)) {  // its adapter still being prepared: others go first
      ++pass.step.n_adapter_waits;
      ++it;
      continue;
    }
    if (!adapter_fits(*seq, adapters)) {  // held back; the first one held is the one overtakes count against
      if (!held) {
        held = seq;
        if (lora_blocked_id_ != seq->id) {
          lora_blocked_id_ = seq->id;
          lora_overtakes_ = 0;
        }
      }
      ++it;
      continue;
    }
    if (held && lora_overtakes_ >= config_.max_num_seqs) break;
    if (!admit(seq, pass)) break;
    if (seq->lora_id) adapters.insert(seq->lora_id);
    if (held) ++lora_overtakes_;
    it = waiting_.erase(it);
  }
}

ScheduledStep ContinuousScheduler::schedule(double now) {
  Pass pass;
  pass.id = next_pass_id();
  pass.now = now;
  pass.budget = config_.max_num_batched_tokens;
  // One allocation for the step's chunks rather than a doubling series as they are added.
  pass.step.chunks.reserve(std::min(running_.size() + waiting_.size() + swapped_.size(),
                                    static_cast<size_t>(config_.max_num_seqs)));
  if (!config_.chunked_prefill) {
    // Prefill-only step when there is prefill work: sequences mid-recompute, then admissions
    // (held back while swapped sequences wait to resume).
    // After a decode step that drew for every running sequence, none has a prefill to resume:
    // no walk over them for it (a first read of ~200 sequences).
    if (!all_drawing_) schedule_running_prefills(pass);
    all_drawing_ = false;
    if (swapped_.empty() && pass.step.preempted.empty()) schedule_admissions(pass);
    if (!pass.step.chunks.empty()) return std::move(pass.step);
    schedule_decodes(pass);
    if (pass.step.preempted.empty()) schedule_swap_ins(pass);
    all_drawing_ = pass.all_drawing && pass.step.swap_in.empty() && pass.step.preempted.empty();
    return std::move(pass.step);
  }
  schedule_decodes(pass);
  if (pass.step.preempted.empty()) schedule_swap_ins(pass);
  schedule_running_prefills(pass);
  // After a preemption the arena is tight: admitting now would only preempt again (vLLM v1 too).
  if (swapped_.empty() && pass.step.preempted.empty()) schedule_admissions(pass);
  return std::move(pass.step);
}

std::span<Sequence* const> ContinuousScheduler::decodes_only() {
  if (!swapped_.empty() || running_.empty() || config_.max_loras > 0 ||
      static_cast<int64_t>(running_.size()) > config_.max_num_batched_tokens)
    return {};
  // Without chunked prefill, all_drawing_ already says every running sequence draws (and none has
  // drafts: they are proposed before schedule(), and a proposer's engine takes no pass-less step).
  if (config_.chunked_prefill || !all_drawing_) {
    for (const Sequence* s : running_)
      if (s->n_computed != s->n_tokens() - 1 || !s->spec_tokens.empty()) return {};
  }
  if (!waiting_.empty()) {
    // With chunked prefill the pass admits after the decodes' holds, into the same step: not taken
    // here. Without it, the pass first tries to admit the head of the queue (FCFS: nothing behind
    // it goes if it does not) into a prefill-only step, and decodes only when it cannot. Every
    // running sequence draws, so each has its first token and takes one seat.
    if (config_.chunked_prefill) return {};
    if (admission_target(*waiting_.front(), config_.max_num_batched_tokens, static_cast<int>(running_.size()),
                         /*step_empty=*/true) > 0)
      return {};
  }
  // What schedule() does now: a walk for prefills to resume (none) and admissions (none), then the
  // decode pass, which holds each running sequence's slot in order and schedules its one row. True
  // from here on: every running sequence draws, and still does after its decode (the pass after
  // such a decode step sets it too).
  all_drawing_ = true;
  return running_;
}

void ContinuousScheduler::on_finished(Sequence* seq) {
  seq->status = SeqStatus::finished;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
}

void ContinuousScheduler::clear() {
  waiting_.clear();
  running_.clear();
  swapped_.clear();
}

void ContinuousScheduler::remove(Sequence* seq) {
  seq->status = SeqStatus::finished;
  std::erase(waiting_, seq);
  std::erase(running_, seq);
  std::erase(swapped_, seq);
}

}  // namespace servelab
