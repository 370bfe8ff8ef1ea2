#include "loadgen/sources.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "engine/backend/sim_backend.h"
#include "engine/spec/sim_proposer.h"
#include "loadgen/backend_spec.h"
#include "loadgen/lora_source.h"
#include "loadgen/sessions.h"

namespace servelab {

namespace {

/// The request for `planned` with its prompt already made.
Request request_with_prompt(const PlannedRequest& planned, uint64_t scenario_seed, std::vector<TokenId> prompt) {
  Request r;
  r.id = planned.id;
  r.prompt = std::move(prompt);
  r.sampling.max_tokens = planned.output_tokens;
  r.sampling.ignore_eos = true;
  r.sampling.seed = scenario_seed ^ planned.id;
  return r;
}

}  // namespace

Request to_request(const PlannedRequest& planned, uint64_t scenario_seed) {
  return request_with_prompt(planned, scenario_seed, planned.prompt);
}

Request to_request(const Plan& plan, size_t index) {
  // Room for the output too: the engine appends it to the same vector (Sequence::tokens), which
  // then never moves its prompt to grow.
  const PlannedRequest& planned = plan.requests.at(index);
  return request_with_prompt(planned, plan.seed, plan.prompt(index, static_cast<size_t>(std::max(0, planned.output_tokens))));
}

OpenLoopSource::OpenLoopSource(Plan plan, int max_concurrency)
    : plan_(std::move(plan)), max_concurrency_(max_concurrency) {
  if (max_concurrency < 0)
    throw std::invalid_argument("max_concurrency must be >= 0 (got " + std::to_string(max_concurrency) + ")");
  for (int i = 0; i < max_concurrency; ++i) free_slots_.insert(-std::numeric_limits<double>::infinity());
}

std::optional<double> OpenLoopSource::next_time() const {
  if (exhausted()) return std::nullopt;
  if (max_concurrency_ > 0 && free_slots_.empty()) return std::nullopt;
  return plan_.requests[next_].intended_s;
}

Request OpenLoopSource::take() {
  if (exhausted()) throw std::logic_error("OpenLoopSource::take: no request left");
  held_until_.reset();
  if (max_concurrency_ > 0) {
    if (free_slots_.empty()) throw std::logic_error("OpenLoopSource::take: max_concurrency reached");
    const double slot = *free_slots_.begin();
    free_slots_.erase(free_slots_.begin());
    ++in_flight_;
    if (slot > plan_.requests[next_].intended_s) held_until_ = slot;
  }
  return to_request(plan_, next_++);
}

void OpenLoopSource::on_finished(const FinishedRequest&, double now) {
  if (max_concurrency_ == 0 || in_flight_ == 0) return;
  --in_flight_;
  free_slots_.insert(now);
}

ClosedLoopSource::ClosedLoopSource(Plan plan, int concurrency) : plan_(std::move(plan)) {
  if (concurrency < 1) throw std::invalid_argument("concurrency must be >= 1 (got " + std::to_string(concurrency) + ")");
  for (int i = 0; i < concurrency; ++i) ready_.insert(0.0);
}

std::optional<double> ClosedLoopSource::next_time() const {
  if (exhausted() || ready_.empty()) return std::nullopt;
  return *ready_.begin();
}

Request ClosedLoopSource::take() {
  if (exhausted()) throw std::logic_error("ClosedLoopSource::take: no request left");
  if (ready_.empty()) throw std::logic_error("ClosedLoopSource::take: every user is waiting for a finish");
  ready_.erase(ready_.begin());
  ++in_flight_;
  return to_request(plan_, next_++);
}

void ClosedLoopSource::on_finished(const FinishedRequest&, double now) {
  if (in_flight_ == 0) return;  // not one of ours
  --in_flight_;
  ready_.insert(now);
}

std::unique_ptr<RequestSource> make_source(const Scenario& scenario, Plan plan) {
  if (scenario.workload.mode == LoadMode::closed_loop) {
    const int c = plan.concurrency > 0 ? plan.concurrency : scenario.workload.concurrency;
    return std::make_unique<ClosedLoopSource>(std::move(plan), c);
  }
  if (scenario.workload.sessions.enabled()) {
    const int cap = plan.max_concurrency;
    return std::make_unique<SessionSource>(std::move(plan), cap);
  }
  const int cap = plan.max_concurrency;
  return std::make_unique<OpenLoopSource>(std::move(plan), cap);
}

std::unique_ptr<RequestSource> make_source(const Scenario& scenario, Plan plan, std::shared_ptr<WorkloadAdapters> loras) {
  if (!loras) return make_source(scenario, std::move(plan));
  const Plan copy = plan;  // the adapter names by request id (a copy of every prompt, unless drawn on demand)
  return std::make_unique<LoraSource>(make_source(scenario, std::move(plan)), copy, std::move(loras));
}

Plan strategy_plan(const Plan& plan, const StrategySpec& strategy) {
  Plan p = plan;
  if (strategy.lora) draw_lora_adapters(p, *strategy.lora);
  return p;
}

std::shared_ptr<WorkloadAdapters> run_adapters(const Scenario& scenario, const StrategySpec& strategy, bool with_weights) {
  const LoraWorkloadSpec& spec = strategy_lora(scenario, strategy);
  if (!spec.enabled()) return nullptr;
  return std::make_shared<WorkloadAdapters>(spec, resolve_model_config(backend_spec(scenario).model), scenario.seed,
                                            with_weights);
}

std::shared_ptr<WorkloadAdapters> run_adapters(const Scenario& scenario, const StrategySpec& strategy,
                                               const Backend& backend) {
  const bool sim = scenario.backend.kind == BackendKind::sim;
  auto adapters = run_adapters(scenario, strategy, !sim);
  if (adapters && sim)
    adapters->price_reads([&backend](const LoraAdapter& a) { return backend.lora_read_seconds(a); });
  return adapters;
}

void apply_strategy(Engine& engine, const StrategySpec& strategy, const BackendFactory& backends) {
  if (!strategy.speculative) return;
  const SpeculativeConfig& sc = *strategy.speculative;
  const ModelConfig& model = engine.backend().config();
  ProposerTarget target;
  target.weights = backends.weights();
  if (!target.weights) target.backend = backends.spec();  // cuda: the draft is built on the target's GPU
  target.vocab_size = model.vocab_size;
  target.max_model_len = engine.config().kv.max_model_len;
  target.max_num_seqs = engine.config().sched.max_num_seqs;
  target.max_num_batched_tokens = engine.config().sched.max_num_batched_tokens;
  target.seed = backends.spec().seed;
  SpecPolicy policy;
  policy.num_speculative_tokens = sc.num_speculative_tokens;
  policy.adaptive = sc.adaptive;
  // Adaptive: what steps with and without drafts measurably yield decides (SpecRateMeter, drafts
  // measured by probes); the cost model is not read then, so no SpecPricing is built.
  policy.measured = sc.adaptive;
  // The sim runs no draft model: its proposer prices one and draws acceptance at the given rates
  // (ngram without sim_acceptance keeps the real lookup over the sim's random tokens).
  // (Runs on the sim never wrap their backend: the roofline and step meters are for real ones.)
  auto* sim = dynamic_cast<SimBackend*>(&engine.backend());
  if (sim && (sc.sim_acceptance || sc.method != SpecMethod::ngram))
    engine.set_proposer(make_sim_proposer(sc, *sim), std::move(policy));
  else
    engine.set_proposer(make_proposer(sc, target), std::move(policy));
}

EngineConfig engine_config(const Scenario& scenario, const StrategySpec& strategy) {
  EngineConfig c;
  c.sched = strategy.sched;
  c.kv = strategy.kv;
  c.kv.max_model_len = scenario.engine.max_model_len;
  c.kv_cache_bytes = scenario.engine.kv_cache_bytes;
  c.swap_space_bytes = scenario.engine.swap_space_bytes;
  c.structured_output = scenario.engine.structured_output;
  c.lora = strategy_lora(scenario, strategy).engine_config();
  return c;
}

}  // namespace servelab
