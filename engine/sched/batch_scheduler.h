#pragma once
// Request-level batching: a batch is formed when the engine is free and runs to completion
// before the next one starts. Static batching (fixed batch_size, prompts padded to the longest,
// finished members keep their row) and dynamic batching (Triton-style: takes what is queued up
// to max_batch_size, no padding, finished members leave) are the same machine with two knobs.
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "engine/sched/scheduler.h"

namespace servelab {

/// The knobs that tell static from dynamic batching.
struct BatchPolicy {
  BatchingKind kind = BatchingKind::static_batch;
  int max_batch = 8;          ///< requests per batch (static batch_size, dynamic max_batch_size)
  double max_wait_s = 0.1;    ///< how long the oldest queued request may wait for the batch to fill
  bool pad = true;            ///< static: pad prompts to the longest and keep finished rows
  std::string size_field;     ///< config field of max_batch, for messages
};

/// Static or dynamic batching. No preemption: a request joins a batch only if its worst case
/// (n_kv_final positions, for each of its n samples) fits in what the batch has not yet committed,
/// so KV growth inside a batch can never fail.
class BatchScheduler final : public Scheduler {
 public:
  BatchScheduler(const BatchPolicy& policy, KvManager& kv);

  BatchingKind kind() const override { return policy_.kind; }
  std::optional<std::string> never_schedulable(const Sequence& seq) const override;
  void add(Sequence* seq) override;
  void add_forked(Sequence* child, const Sequence& parent) override;
  ScheduledStep schedule(double now) override;
  void on_finished(Sequence* seq) override;
  void clear() override;
  void remove(Sequence* seq) override;
  int n_waiting() const override { return static_cast<int>(waiting_.size()); }
  int n_running() const override { return static_cast<int>(members_.size()); }
  std::vector<const Sequence*> live() const override;
  const Sequence* next_waiting() const override { return waiting_.empty() ? nullptr : waiting_.front(); }
  std::optional<double> next_wakeup() const override;

 private:
  bool batch_active() const;
  /// Worst-case slots a waiting request commits: n samples, each up to n_kv_final positions.
  int64_t worst_case_slots(const Sequence& seq) const;
  void form_batch();
  ScheduledStep prefill_step();
  ScheduledStep decode_step();

  BatchPolicy policy_;
  KvManager& kv_;
  std::deque<Sequence*> waiting_;   // main sequences of queued requests, FCFS
  std::vector<Sequence*> members_;  // the running batch's unfinished sequences
  int n_finished_rows_ = 0;         // finished members: static batching keeps computing their rows
  bool prefilled_ = false;
};

}  // namespace servelab
