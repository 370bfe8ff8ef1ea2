#pragma once
// Engine: a synchronous state machine. add() queues a request; step(now) proposes drafts,
// schedules a batch, allocates KV, builds the step, runs the backend, accepts the draws, stamps
// times and retires finished requests.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/finished_request.h"
#include "engine/kv/kv_manager.h"
#include "engine/kv/swap_space.h"
#include "engine/lora/lora_config.h"
#include "engine/request.h"
#include "engine/structured_output_config.h"
#include "engine/sched/scheduler_config.h"
#include "engine/spec/adaptive.h"
#include "engine/spec/proposer.h"

namespace servelab {

struct EngineConfig {
  SchedulerConfig sched;
  KvConfig kv;
  int64_t kv_cache_bytes = 64ll << 20;  ///< the arena; n_slots = kv_cache_bytes / backend.kv_bytes_per_slot()
  /// Host memory for swap preemption (vLLM's swap_space, default 4 GiB): allocated by the backend
  /// (Backend::make_host_pool) only when the continuous policy preempts by swap. A swap
  /// preemption whose K/V does not fit what is left recomputes instead (StepOutcome::swap_pool_full);
  /// 0 makes every one recompute. In [0, kMaxSwapSpaceBytes].
  int64_t swap_space_bytes = 4ll << 30;
  static constexpr int64_t kMaxSwapSpaceBytes = 1ll << 40;  ///< 1 TiB
  /// Multi-LoRA (continuous batching only): requests may name an adapter (Request::lora); at most
  /// lora.max_loras distinct adapters run at once (the backend's slots, the scheduler's bound).
  LoraConfig lora;
  StructuredOutputConfig structured_output;
  void validate() const;
};

/// Checks that config's arena can hold one sequence's smallest allocation for `model` with K/V
/// slots of kv_bytes_per_slot bytes (paged: one block; naive reserve max: max_model_len, capped
/// at the model's max_position; otherwise one token). Throws std::invalid_argument naming
/// engine.kv_cache_bytes, what it holds and what it must be. Returns the arena's slot count.
/// The Engine constructor calls it; scenario validation calls it too, so a bad arena fails at
/// `servelab validate` rather than after earlier runs finished.
int64_t check_kv_arena(const EngineConfig& config, const ModelConfig& model, int64_t kv_bytes_per_slot);
/// The largest step `config`'s scheduler sends (max_step_rows / max_step_seqs, max_model_len, the
/// paged block size): what the engine asks its backend to reserve (Backend::reserve_steps).
StepLimits step_limits(const EngineConfig& config);

struct StepOutcome {
  double start_s = 0.0;
  double duration_s = 0.0;       ///< measured, or predicted by a sim backend
  /// The step's host wall time around its forward (always wall time, also on the sim): before it
  /// (drafting, scheduling, KV moves, masks, the step's input rows; inside duration_s), the
  /// backend's execute() itself, and after it (tokens, retirements, KV bookkeeping; not in
  /// duration_s: a real run pays it before the next step starts). 0 when no forward ran.
  double host_before_s = 0.0;
  double forward_s = 0.0;
  double host_after_s = 0.0;
  /// Of forward_s, the step's span on the device (StepOutput::device_s; 0 where the backend does
  /// not measure it: cpu, sim).
  double device_s = 0.0;
  int batch_size = 0;            ///< sequences in the batch
  /// The longest context a sequence of the step reaches (its tokens after the step's rows): what
  /// sizes a decode graph's attention grid on cuda (graph_buckets.h).
  int max_context = 0;
  int n_tokens = 0;              ///< tokens computed (padding excluded)
  int n_padding_tokens = 0;
  std::vector<TokenEvent> tokens;
  std::vector<FinishedRequest> finished;
  std::vector<uint64_t> preempted;   ///< request ids preempted in this step
  /// Of those, the ones preempted under `preemption: swap` that recompute because the host swap
  /// pool was full.
  std::vector<uint64_t> swap_pool_full;
  /// Speculative decoding in this step (vLLM's spec_decode counters): sequences that verified
  /// drafts, the drafts, the ones accepted, and accepted per draft position (index 0 = first).
  int spec_drafts = 0;
  int spec_draft_tokens = 0;
  int spec_accepted_tokens = 0;
  std::vector<int> spec_accepted_per_pos;
  /// Drafts per draft position (index j: drafts of more than j tokens). With adaptive k the
  /// drafts differ in length, so the conditional acceptance at j is not accepted[j] /
  /// accepted[j - 1]; with these it can be recovered (engine/spec/sim_acceptance.h).
  std::vector<int> spec_drafted_per_pos;
  /// Seconds the proposer took to draft for this step: wall time on real backends (included in
  /// duration_s), the priced draft time on the sim (also included: SimBackend::charge_seconds).
  double spec_draft_s = 0.0;
  /// Of spec_draft_s, the catch-up a step drafting after plain ones pays once (Proposer::
  /// catch_up_excess_s): what an exploring step costs beyond a steady drafting step.
  double spec_catch_up_s = 0.0;
  /// A probe of the measured rule (SpecRateMeter, engine/spec/adaptive.h): drafts for a few of the
  /// sequences asked, verified, each keeping only its first draw (the plain step's token), so no
  /// sequence moved ahead. Its drafts are not in the spec_* counters above (no token of theirs
  /// stood) but in these: sequences probed, their draft tokens, and those that would have stood.
  bool spec_probe = false;
  int spec_probe_drafts = 0;
  int spec_probe_draft_tokens = 0;
  int spec_probe_accepted_tokens = 0;
  /// A proposer is set but the per-step rule (SpecPolicy::pricing, or what steps measured) found
  /// drafts a loss at this batch, so none were proposed.
  bool spec_off = false;
  KvBreakdown kv;                ///< after the step (all zero when Engine::set_kv_breakdown(false))
  int n_waiting = 0;
  int n_running = 0;
  int n_loras = 0;        ///< distinct LoRA adapters in the step
  int n_lora_loads = 0;   ///< adapters loaded into the backend's slots for it (misses)
  int n_lora_waits = 0;   ///< waiting requests passed over while their adapter was being packed
  /// Structured output: token masks filled for the step's draws, the host seconds they took
  /// (inside the backend's execute when overlapped, before it otherwise), and tokens appended by
  /// jump-forward without a forward of their own.
  int n_masks = 0;
  double mask_s = 0.0;
  int n_jump_forward_tokens = 0;
  bool idle() const { return batch_size == 0; }
};

class Scheduler;
class LoraSlots;

/// How an engine speculates beyond its proposer (engine/spec/adaptive.h).
struct SpecPolicy {
  int num_speculative_tokens = 3;  ///< k_max, >= 1
  bool adaptive = true;            ///< per-sequence k from its acceptance; false: always k_max
  /// Set: drafts are proposed in a step only when the cost model says they pay at its batch.
  std::optional<SpecPricing> pricing;
  /// With adaptive: the cost model's verdict is a prior, and what steps with and without drafts
  /// measurably yield per batch size decides (SpecRateMeter, engine/spec/adaptive.h). Scenario
  /// runs set it; off, the choice is the cost model's alone (deterministic on any backend).
  bool measured = false;
};

class Engine {
 public:
  Engine(const EngineConfig& config, std::unique_ptr<Backend> backend);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues a request that arrived at `arrival` (<= the next step's time; the runner passes the
  /// intended time of a request that came due while it was busy). Batching timers (static
  /// max_wait_ms, dynamic max_queue_delay_ms) count from it. A request that can never run
  /// (longer than the model's max length, or larger than the whole arena) is returned at once
  /// as rejected (end_s = arrival), with its reason.
  /// Taken by value: a caller that moves its request in hands over the prompt without a copy.
  std::optional<FinishedRequest> add(Request request, double arrival);
  /// One iteration. With nothing runnable it returns an idle outcome (batch_size 0).
  StepOutcome step(double now);
  /// step(now) when it would be a step of plain decodes of every running sequence (nothing to
  /// admit, no drafts, masks, adapters or parallel samples' first draws) on a backend with a
  /// ShapeDecoder (the sim), with the KV breakdown off: the same step, made without a scheduler
  /// pass, a Batch or token events. `out` (reused; its finished list is cleared) gets start_s,
  /// duration_s, batch_size, n_tokens (= the tokens drawn) and finished, and nothing else: no
  /// TokenEvents (a caller that wants them calls step()). False, with `out` untouched, when the
  /// step is not one; the caller then calls step(now), which makes the same step (the slots held
  /// so far are the ones its pass holds first).
  bool step_decodes(double now, StepOutcome& out);
  /// Aborts one request (its client went away): frees its KV now and drops it from the
  /// scheduler's queues. Returns its record (reason aborted), or nullopt when it is not in flight.
  std::optional<FinishedRequest> abort(uint64_t request_id, double now, const std::string& why);
  /// Aborts everything in flight (Ctrl-C); returns them as aborted.
  std::vector<FinishedRequest> abort_all(double now);
  /// The run is stalled (nothing runnable, nothing will change): rejects only the request at the
  /// head of the scheduler's queue, the one that cannot be placed, with `why`, freeing all its
  /// samples. nullopt when nothing waits. Everything else stays in flight.
  std::optional<FinishedRequest> reject_blocked(double now, const std::string& why);

  /// Speculative decoding (continuous batching only): before each step, every running sequence
  /// about to draw gets up to num_speculative_tokens drafts from `proposer` (never past its
  /// max_tokens), verified in that step. Null turns it off. Throws std::invalid_argument for
  /// another batching policy, n > 1 requests being unsupported then (they draw without drafts).
  void set_proposer(std::unique_ptr<Proposer> proposer, int num_speculative_tokens);
  /// The same with the adaptive rules (SpecPolicy). Throws std::invalid_argument as above.
  void set_proposer(std::unique_ptr<Proposer> proposer, SpecPolicy policy);
  const Proposer* proposer() const { return proposer_.get(); }

  /// Whether step() fills StepOutcome::kv, a walk over the running sequences' KV every step (on
  /// by default). A driver that only counts steps turns it off; nothing else in a step reads it.
  void set_kv_breakdown(bool on) { kv_breakdown_ = on; }
  bool kv_breakdown() const { return kv_breakdown_; }
  /// Whether finished requests carry every token's time (FinishedRequest::token_times_s; on by
  /// default). Off, a request keeps only its first token's time and its length, what a driver
  /// whose records leave the times out needs (a capacity probe's): first_token_s and n_output
  /// are those the times would give, token_times_s is empty.
  void set_token_times(bool on);
  bool token_times() const;

  bool has_work() const;
  /// Multi-LoRA: the adapters of the requests in flight, by name, sorted, each once: those of a
  /// request with a sequence running, and those of a request whose every sequence waits (queued,
  /// preempted or swapped out); an adapter with requests of both kinds is in both, as in vLLM's
  /// lora_requests_info. Walks the requests in flight.
  struct LoraRequests {
    std::vector<std::string> running, waiting;
  };
  LoraRequests lora_requests() const;
  /// When nothing is runnable now but a policy timer will fire (static max_wait_ms, dynamic
  /// max_queue_delay_ms), the time to call step() again.
  std::optional<double> next_wakeup() const;

  /// Checks the KV manager's invariants over the sequences holding KV (tests call it after
  /// every step); throws std::logic_error.
  void check_invariants() const;

  const Backend& backend() const { return *backend_; }
  /// For what a strategy sets up beside the engine (a sim proposer charges the sim backend).
  Backend& backend() { return *backend_; }
  const KvManager& kv() const { return *kv_; }
  /// The host swap pool's bookkeeping; null unless the policy preempts by swap.
  const SwapSpace* swap_space() const { return swap_.get(); }
  const EngineConfig& config() const { return config_; }

 private:
  /// Frees seq's arena slots and, when it is swapped out, its host swap blocks.
  void release_kv(Sequence& seq);
  /// Drafts for the running sequences about to draw, unless the policy finds them a loss.
  /// Returns how many sequences were asked for drafts (the measured rule's bucket), 0 for none.
  int propose_drafts(StepOutcome& out);

  EngineConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvManager> kv_;
  std::unique_ptr<SwapSpace> swap_;         // swap preemption: which host slots hold what
  std::unique_ptr<HostKvPool> host_pool_;   // ... and the backend's memory behind them
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Proposer> proposer_;
  std::unique_ptr<LoraSlots> lora_slots_;  // enabled LoRA: which adapter sits in which backend slot
  uint64_t n_steps_ = 0;
  bool kv_breakdown_ = true;
  SpecPolicy spec_;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace servelab
