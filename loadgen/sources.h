#pragma once
// Request sources the runner (engine/runner.h) pulls from, built over a Plan, and the
// scenario → EngineConfig mapping.
#include <cstdint>
#include <memory>
#include <optional>
#include <set>

#include "engine/backend/make_backend.h"
#include "engine/engine.h"
#include "engine/runner.h"
#include "loadgen/plan.h"
#include "loadgen/scenario.h"

namespace servelab {

/// The engine request for a planned one: its prompt, and sampling {max_tokens = output_tokens,
/// ignore_eos = true, seed = scenario seed ^ id} (greedy, as the defaults are).
Request to_request(const PlannedRequest& planned, uint64_t scenario_seed);
/// The same for plan.requests[index], its prompt from Plan::prompt (drawn now when the plan
/// draws prompts on demand, copied otherwise).
Request to_request(const Plan& plan, size_t index);

/// Open loop (Poisson/gamma/constant arrivals, or a trace): each request is due at its intended
/// time whatever the engine is doing, so queueing shows up in the latencies (no coordinated
/// omission).
///
/// max_concurrency > 0 caps the requests in flight (as `vllm bench serve --max-concurrency`): a
/// request due while the cap is reached waits for a finish; next_time() still gives its intended
/// time (its latency counts from when it was due) and held_until() the time a slot freed, which
/// the driver stamps as its send time, so the wait shows as lateness. The runner must call
/// on_finished for every request it took, or a capped source stalls.
class OpenLoopSource final : public RequestSource {
 public:
  explicit OpenLoopSource(Plan plan, int max_concurrency = 0);
  std::optional<double> next_time() const override;  ///< nullopt while the cap is reached
  Request take() override;
  bool exhausted() const override { return next_ >= plan_.requests.size(); }
  void on_finished(const FinishedRequest& r, double now) override;
  std::optional<double> held_until() const override { return held_until_; }
  const Plan& plan() const { return plan_; }
  int in_flight() const { return in_flight_; }

 private:
  Plan plan_;
  size_t next_ = 0;
  int max_concurrency_ = 0;
  int in_flight_ = 0;
  std::multiset<double> free_slots_;   ///< capped: times at which each free slot became free
  std::optional<double> held_until_;
};

/// Closed loop with N users: N requests are due at t = 0, and each finish (or rejection) makes
/// one more due at that finish time, until the plan is used up. Requests go out in plan order, so
/// lengths are the same as in any other run of the plan. The runner must call on_finished for
/// every request it took (rejected ones included), or the loop stalls.
class ClosedLoopSource final : public RequestSource {
 public:
  ClosedLoopSource(Plan plan, int concurrency);
  std::optional<double> next_time() const override;  ///< nullopt while all N users wait
  Request take() override;
  bool exhausted() const override { return next_ >= plan_.requests.size(); }
  void on_finished(const FinishedRequest& r, double now) override;
  const Plan& plan() const { return plan_; }
  int in_flight() const { return in_flight_; }

 private:
  Plan plan_;
  size_t next_ = 0;
  int in_flight_ = 0;
  std::multiset<double> ready_;  ///< times at which a user is free to send
};

/// The source for the scenario's load mode (open loop and trace: OpenLoopSource, capped at
/// plan.max_concurrency; sessions: SessionSource; closed loop: ClosedLoopSource at
/// plan.concurrency).
std::unique_ptr<RequestSource> make_source(const Scenario& scenario, Plan plan);
/// make_source, with each request's adapter attached (LoraSource) when the strategy runs adapters
/// (`loras` non-null).
std::unique_ptr<RequestSource> make_source(const Scenario& scenario, Plan plan, std::shared_ptr<WorkloadAdapters> loras);
/// The strategy's adapters (strategy_lora: its `lora:` or workload.lora) for a run, with the
/// scenario's model and seed, drawn as requests name them (WorkloadAdapters); with_weights for an
/// in-process cpu or cuda engine. Null when the strategy runs none.
std::shared_ptr<WorkloadAdapters> run_adapters(const Scenario& scenario, const StrategySpec& strategy, bool with_weights);
/// The same for an in-process run on `backend` (the engine's): with weights unless the scenario
/// runs on the sim, whose adapter reads are priced by backend.lora_read_seconds instead.
std::shared_ptr<WorkloadAdapters> run_adapters(const Scenario& scenario, const StrategySpec& strategy,
                                               const Backend& backend);
/// The plan a strategy runs: `plan` itself, or, for a strategy with its own `lora:`, a copy whose
/// requests name adapters drawn from it (draw_lora_adapters).
Plan strategy_plan(const Plan& plan, const StrategySpec& strategy);

/// EngineConfig of one strategy: its scheduler and KV settings, the scenario's arena size, and
/// kv.max_model_len = engine.max_model_len. (Not validated here: call config.validate().)
EngineConfig engine_config(const Scenario& scenario, const StrategySpec& strategy);
/// What a strategy sets on its engine beyond the config: its speculative proposer (a model
/// proposer cut from or beside `backends`' cpu weights) and its policy (adaptive k, and the
/// per-step rule priced by the scenario's sim cost model: its profile or sim_device).
void apply_strategy(Engine& engine, const StrategySpec& strategy, const BackendFactory& backends);

}  // namespace servelab
