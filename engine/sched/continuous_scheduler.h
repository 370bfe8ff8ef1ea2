#pragma once
// Continuous (iteration-level) batching, FCFS, as Orca and vLLM do it: every step retires
// finished sequences and admits waiting ones within max_num_seqs and a max_num_batched_tokens
// budget; when KV runs out the newest running sequence is preempted (recompute or swap).
//
// There is no prefill or decode phase (vLLM v1): each sequence's computed count catches up to its
// tokens, speculative ones included (n_pending), within the step's token budget. A sequence that
// draws this step (its last accepted token, plus k drafts to verify: 1 + k rows) is a "drawing"
// one; any other is catching up on its prompt (or on everything, after a recompute preemption).
// Without chunked prefill (vLLM v0's shape): a step is either catch-up only (admissions, whole
// prompts that fit the budget) or drawing only.
// With chunked prefill (Sarathi-Serve, vLLM v1): drawing sequences first, then the rest of the
// budget goes to catch-up chunks, partially prefilled sequences before new ones, all in one batch.
//
// LoRA adapters (max_loras > 0): running and swapped sequences together hold at most max_loras
// distinct adapters (the base model is none), so every step fits the backend's adapter slots. A
// waiting sequence whose adapter would exceed that is held back; requests behind it whose
// adapter is already running (or that use the base model) may overtake it, at most max_num_seqs
// of them per held-back sequence (kept as vLLM keeps admitting popular adapters, bounded so that
// a popular adapter cannot starve a rare one); after that admission waits for it. It then gets in
// once every running sequence of some adapter has finished, which bounded outputs guarantee.
// A sequence whose adapter is not ready (SchedulerConfig::adapter_ready: a device backend still
// packing it) is passed over, with no bound on overtakes, until it is ready, until
// adapter_ready_wait_s after its arrival, or until the step would otherwise be empty; so the
// adapter miss costs the other requests' steps the copy only, not the packing.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/sched/scheduler.h"

namespace servelab {

class ContinuousScheduler final : public Scheduler {
 public:
  /// swap: where `preemption: swap` puts victims' K/V (null: every preemption recomputes).
  ContinuousScheduler(const SchedulerConfig& config, KvManager& kv, SwapSpace* swap = nullptr);

  BatchingKind kind() const override { return BatchingKind::continuous; }
  std::optional<std::string> never_schedulable(const Sequence& seq) const override;
  void add(Sequence* seq) override;
  void add_forked(Sequence* child, const Sequence& parent) override;
  ScheduledStep schedule(double now) override;
  void on_finished(Sequence* seq) override;
  void on_tokens_appended(const Sequence&) override { all_drawing_ = false; }
  std::span<Sequence* const> decodes_only() override;
  void clear() override;
  void remove(Sequence* seq) override;
  /// Share of the arena kept free when admitting next to running sequences (vLLM: 1%).
  static constexpr double kWatermark = 0.01;
  int n_waiting() const override { return static_cast<int>(waiting_.size() + swapped_.size()); }
  int n_running() const override { return static_cast<int>(running_.size()); }
  std::vector<const Sequence*> live() const override;
  /// Swapped sequences resume before new admissions.
  const Sequence* next_waiting() const override {
    if (!swapped_.empty()) return swapped_.front();
    return waiting_.empty() ? nullptr : waiting_.front();
  }
  std::optional<double> next_wakeup() const override { return std::nullopt; }

 private:
  /// One schedule() call's working state.
  struct Pass {
    ScheduledStep step;
    int budget = 0;  ///< tokens left under max_num_batched_tokens
    double now = 0.0;
    /// This pass's number, unique in the process (next_pass_id()): a sequence has a chunk in
    /// step when its sched_pass is this.
    uint64_t id = 0;
    std::unordered_set<const Sequence*> resumed;  ///< swapped in this step: not to be preempted again
    /// Seats the running sequences take (seats()), worked out at the pass's first admission and
    /// kept up as it admits (-1: not yet): admissions come last in a pass, so nothing else
    /// changes running_ between them, and a walk over it for every admission cost a cache line or
    /// two a running sequence.
    int seats_taken = -1;
    /// schedule_decodes saw every running sequence and each of them draws (no prefill pending).
    bool all_drawing = false;
    bool scheduled(const Sequence* s) const { return s->sched_pass == id; }
    void add_chunk(Sequence* s, int n_new);
    /// Takes s's chunk back out (s was preempted after being picked), returning its tokens.
    void drop_chunk(Sequence* s);
  };

  /// Seats in running a waiting sequence takes (a fresh request brings its n samples).
  int seats(const Sequence& seq) const;
  /// Makes seq hold [0, n_tokens) positions, growing if needed; false when the arena is short.
  bool hold(Sequence& seq, int n_tokens);
  /// Largest n in [1, want] for which seq can hold n_computed + n positions (0 if none).
  int fit_chunk(Sequence& seq, int want);

  void preempt(Sequence* victim, Pass& pass);
  /// The sequence draws this step: everything but its last accepted token is computed.
  static bool drawing(const Sequence& s) { return s.n_computed >= s.n_tokens() - 1; }
  /// Schedules drawing sequence s's 1 + k rows (drafts trimmed to the budget, dropped before
  /// anyone is preempted for KV); false when s itself had to be preempted.
  bool catch_up_drawing(Sequence* s, Pass& pass);
  void schedule_decodes(Pass& pass);
  void schedule_swap_ins(Pass& pass);
  void schedule_running_prefills(Pass& pass);
  void schedule_admissions(Pass& pass);
  /// Positions seq would hold if admitted now into a pass with `budget` tokens left, `seats_taken`
  /// seats taken and (step_empty) no chunk yet; 0 when it cannot be admitted. Changes nothing.
  int admission_target(const Sequence& seq, int budget, int seats_taken, bool step_empty) const;
  /// Admits the head of waiting; false when it does not fit (FCFS: nothing behind it goes either).
  bool admit(Sequence* seq, Pass& pass);
  /// The adapter bound admits seq: no bound, no adapter, its adapter among `held` (the adapters
  /// of running and swapped sequences), or fewer than max_loras adapters there.
  bool adapter_fits(const Sequence& seq, const std::unordered_set<uint64_t>& held) const;
  /// seq waits for its adapter's preparation (adapter_ready false, within adapter_ready_wait_s of
  /// its arrival) while something else runs: no running adapter of its, a step not empty.
  bool waits_for_adapter(const Sequence& seq, const std::unordered_set<uint64_t>& held, const Pass& pass) const;

  SchedulerConfig config_;
  KvManager& kv_;
  SwapSpace* swap_ = nullptr;
  std::deque<Sequence*> waiting_;   // FCFS; recompute-preempted sequences go back to the front
  std::vector<Sequence*> running_;  // admission order: oldest first, preemption takes the back
  std::deque<Sequence*> swapped_;   // swapped out, resumed from the front before new admissions
  int64_t watermark_slots_ = 0;
  /// Without chunked prefill: the last pass was a decode step that scheduled every running
  /// sequence's draw (no swap-in, no preemption), so every running sequence draws now (a step
  /// leaves a drawing sequence drawing, unless tokens are appended without one:
  /// on_tokens_appended) and the next pass skips its walk for prefills to resume.
  bool all_drawing_ = false;
  uint64_t lora_blocked_id_ = 0;  // the sequence the adapter bound holds back (0 = none yet)
  int lora_overtakes_ = 0;        // requests admitted past it so far
};

}  // namespace servelab
