#pragma once
// Scheduler: the batching policy. Each step it picks which sequences run and how many positions
// each computes, and it owns their KV bookkeeping (allocation on admission, growth, preemption)
// through the KvManager. It never touches K/V data: swaps it wants are listed in the step for the
// engine to carry out through the backend before the forward.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/kv_manager.h"
#include "engine/kv/swap_space.h"
#include "engine/request.h"
#include "engine/sched/scheduler_config.h"

namespace servelab {

/// One sequence's share of a step: positions [seq->n_computed, seq->n_computed + n_new). The
/// sequence already holds KV slots for all of them when the step is handed out.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int n_new = 0;
};

/// K/V to move between the arena and the host swap pool (swap preemption): runs of whole blocks
/// (SwapSpace::runs). Swap out: positions [0, n_computed). Swap in: the same, less the leading
/// positions the prefix cache handed back, which other sequences share and already hold.
struct SwapTransfer {
  Sequence* seq = nullptr;
  std::vector<KvSwap> runs;
};

/// What the scheduler decided for one step. The engine applies it in this order: swap_out (their
/// slots are already released, but nothing has overwritten them yet), copy-on-write copies,
/// swap_in (then it returns those sequences' swap blocks to the SwapSpace), then the chunks.
struct ScheduledStep {
  std::vector<ScheduledChunk> chunks;
  int n_padding_tokens = 0;              ///< static batching: rows computed and thrown away
  std::vector<SwapTransfer> swap_out;
  std::vector<SwapTransfer> swap_in;
  std::vector<Sequence*> preempted;      ///< sent back to waiting (recompute) or swapped out
  /// Preempted under `preemption: swap` but recomputed: the host swap pool could not hold their
  /// K/V (each is in `preempted` too).
  std::vector<Sequence*> swap_pool_full;
  /// Waiting sequences passed over because their LoRA adapter was still being prepared
  /// (SchedulerConfig::adapter_ready).
  int n_adapter_waits = 0;
  bool empty() const { return chunks.empty(); }
};

/// Positions of seq still to compute, speculative tokens included: 1 for a plain decode, 1 + k when
/// verifying k drafts, more while its prompt is being prefilled.
inline int n_pending(const Sequence& seq) { return seq.n_with_spec() - seq.n_computed; }

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual BatchingKind kind() const = 0;

  /// Why a new request's main sequence (unallocated, n_computed 0) can never be scheduled under
  /// this policy and arena, or nullopt when it can. Checked by Engine::add before add().
  virtual std::optional<std::string> never_schedulable(const Sequence& seq) const = 0;
  /// Queues a new sequence (status waiting, no KV).
  virtual void add(Sequence* seq) = 0;
  /// A parallel sample just forked from `parent` (holding KV, running) joins parent's batch.
  virtual void add_forked(Sequence* child, const Sequence& parent) = 0;

  /// Picks the next step at time `now`; empty when nothing is runnable yet.
  virtual ScheduledStep schedule(double now) = 0;
  /// seq finished and its KV was released: it leaves the policy's queues.
  virtual void on_finished(Sequence* seq) = 0;
  /// Running seq took tokens no step computed (structured output's jump-forward): it catches up
  /// on them before it draws again.
  virtual void on_tokens_appended(const Sequence& seq) { (void)seq; }
  /// Steps of plain decodes without a pass (Engine::step_decodes): when the next schedule() would
  /// be a decode pass and nothing else (nothing swapped out or to admit, every running sequence
  /// drawing one row without drafts, within the token budget), the running sequences in the
  /// order that pass takes them; else empty. The pass holds each one's next slot in that order
  /// (KvManager::allocate_slots(seq, 1)) and preempts at the first the arena cannot hold: a
  /// caller that makes those holds itself, in order, has made the ones the pass makes first, so
  /// on a failed hold it calls schedule() as usual. Default: empty (never).
  virtual std::span<Sequence* const> decodes_only() { return {}; }
  /// Forgets every sequence (abort); the caller releases their KV.
  virtual void clear() = 0;
  /// seq's request was aborted (a client went away) or rejected (it can never fit): it leaves
  /// every queue now and is marked finished; the caller releases its KV.
  virtual void remove(Sequence* seq) = 0;

  virtual int n_waiting() const = 0;   ///< queued, preempted or swapped out
  virtual int n_running() const = 0;   ///< in the current batch and not finished
  /// Sequences holding KV (for the arena breakdown and invariant checks).
  virtual std::vector<const Sequence*> live() const = 0;
  /// The sequence this policy would allocate KV for next (head of its queue), or nullptr.
  virtual const Sequence* next_waiting() const = 0;
  /// When nothing is runnable but a timer will make the policy start a batch.
  virtual std::optional<double> next_wakeup() const = 0;
};

/// The policy config.kind names, over `kv`. `swap`: the host swap pool's bookkeeping that swap
/// preemption takes blocks from (null or full: a swap preemption recomputes instead). Throws
/// std::invalid_argument from config.validate().
std::unique_ptr<Scheduler> make_scheduler(const SchedulerConfig& config, KvManager& kv, SwapSpace* swap = nullptr);

}  // namespace servelab
