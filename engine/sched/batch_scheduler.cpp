#include "engine/sched/batch_scheduler.h"

#include <algorithm>
#include <stdexcept>

namespace servelab {

BatchScheduler::BatchScheduler(const BatchPolicy& policy, KvManager& kv) : policy_(policy), kv_(kv) {
  if (policy_.max_batch < 1)
    throw std::invalid_argument(policy_.size_field + " must be >= 1 (got " +
                                std::to_string(policy_.max_batch) + ")");
}

int64_t BatchScheduler::worst_case_slots(const Sequence& seq) const {
  return static_cast<int64_t>(std::max(1, seq.sampling.n)) * kv_.worst_case_slots(seq);
}

std::optional<std::string> BatchScheduler::never_schedulable(const Sequence& seq) const {
  const int64_t need = worst_case_slots(seq);
  if (need > kv_.capacity_slots())
    return "needs " + std::to_string(need) + " KV slots in the worst case (" +
           std::to_string(std::max(1, seq.sampling.n)) + " sample(s) of up to " +
           std::to_string(seq.n_kv_final()) + " positions) but the whole arena holds " +
           std::to_string(kv_.capacity_slots()) + " (raise engine.kv_cache_bytes)";
  return std::nullopt;
}

void BatchScheduler::add(Sequence* seq) {
  seq->status = SeqStatus::waiting;
  waiting_.push_back(seq);
}

void BatchScheduler::add_forked(Sequence* child, const Sequence& parent) {
  // Its worst case was committed with the parent's, so a child the manager could not fork
  // (naive: no free region) still fits now.
  if (!child->kv.allocated) {
    if (!kv_.can_allocate(*child, child->n_tokens()))
      throw std::logic_error("batch scheduler: no KV for sample " + std::to_string(child->sample_index) +
                             " of request " + std::to_string(child->request_id) +
                             " although its worst case was committed at admission");
    kv_.allocate(*child, child->n_tokens());
    child->n_computed = std::clamp(child->kv.n_cached_prefix, 0, child->n_tokens() - 1);
  }
  child->status = SeqStatus::running;
  members_.push_back(child);
}

bool BatchScheduler::batch_active() const { return !members_.empty(); }

std::vector<const Sequence*> BatchScheduler::live() const {
  std::vector<const Sequence*> out;
  for (const Sequence* s : members_)
    if (s->kv.allocated) out.push_back(s);
  return out;
}

std::optional<double> BatchScheduler::next_wakeup() const {
  if (batch_active() || waiting_.empty()) return std::nullopt;
  return waiting_.front()->arrival_s + policy_.max_wait_s;
}

void BatchScheduler::form_batch() {
  // Nothing else holds KV between batches, so what is free now is what the batch may commit.
  const int64_t budget = kv_.free_slots();
  int64_t committed = 0;
  while (!waiting_.empty() && static_cast<int>(members_.size()) < policy_.max_batch) {
    Sequence* s = waiting_.front();
    const int64_t need = worst_case_slots(*s);
    if (committed + need > budget || !kv_.can_allocate(*s, s->n_tokens())) break;  // FCFS: no skipping
    kv_.allocate(*s, s->n_tokens());
    s->n_computed = std::clamp(s->kv.n_cached_prefix, 0, s->n_tokens() - 1);
    s->status = SeqStatus::running;
    committed += need;
    members_.push_back(s);
    waiting_.pop_front();
  }
  prefilled_ = false;
}

ScheduledStep BatchScheduler::prefill_step() {
  ScheduledStep step;
  int longest = 0;
  for (Sequence* s : members_) {
    step.chunks.push_back({s, n_pending(*s)});
    longest = std::max(longest, n_pending(*s));
  }
  if (policy_.pad)
    for (const auto& c : step.chunks) step.n_padding_tokens += longest - c.n_new;
  prefilled_ = true;
  return step;
}

ScheduledStep BatchScheduler::decode_step() {
  ScheduledStep step;
  if (policy_.pad) step.n_padding_tokens = n_finished_rows_;  // finished rows still run with the batch
  for (Sequence* s : members_) {
    const int target = s->n_tokens();
    if (kv_.slots_needed(*s, target) > 0) {
      if (!kv_.can_grow(*s, target))
        throw std::logic_error("batch scheduler: KV growth failed for sequence " + std::to_string(s->id) +
                               " although its worst case was committed at admission");
      kv_.grow(*s, target);
    }
    step.chunks.push_back({s, n_pending(*s)});
  }
  return step;
}

ScheduledStep BatchScheduler::schedule(double now) {
  if (!batch_active()) {
    n_finished_rows_ = 0;
    if (waiting_.empty()) return {};
    const bool full = static_cast<int>(waiting_.size()) >= policy_.max_batch;
    if (!full && now < waiting_.front()->arrival_s + policy_.max_wait_s) return {};
    form_batch();
    if (members_.empty()) return {};
  }
  return prefilled_ ? decode_step() : prefill_step();
}

void BatchScheduler::on_finished(Sequence* seq) {
  // The engine frees a finished sequence once its request is done: only a count of its row stays.
  seq->status = SeqStatus::finished;
  members_.erase(std::remove(members_.begin(), members_.end(), seq), members_.end());
  ++n_finished_rows_;
}

void BatchScheduler::clear() {
  waiting_.clear();
  members_.clear();
  n_finished_rows_ = 0;
  prefilled_ = false;
}

void BatchScheduler::remove(Sequence* seq) {
  // A member's row is counted as finished: static batching keeps computing padded rows.
  if (std::erase(members_, seq) > 0) ++n_finished_rows_;
  std::erase(waiting_, seq);
  seq->status = SeqStatus::finished;
}

}  // namespace servelab
