#include "loadgen/capacity_probe.h"

#include <chrono>
#include <stdexcept>

#include "engine/backend/sim_backend.h"
#include "engine/clock.h"
#include "engine/model/quantize_weights.h"
#include "engine/engine.h"
#include "loadgen/backend_spec.h"
#include "loadgen/http_sweep.h"
#include "loadgen/measuring_backend.h"
#include "loadgen/plan.h"
#include "loadgen/sources.h"
#include "loadgen/sweep.h"

namespace servelab {

PointRunner::PointRunner(const Scenario& scenario)
    : scenario_(scenario), spec_(servelab::backend_spec(scenario)), structured_(make_structured_setup(scenario)) {
  if (scenario.target) {  // a server does the work: no engine here
    if (!scenario.target->tokenizer.empty()) target_tokenizer_ = load_tokenizer_from_dir(scenario.target->tokenizer);
    return;
  }
  backends_ = std::make_unique<BackendFactory>(spec_);  // cpu: the weights, once
  if (spec_.kind != BackendKind::cpu) {
    make_backend_instance();  // a bad profile or device fails here, before any probe
    for (size_t i = 0; i < scenario_.strategies.size(); ++i)
      if (auto b = kv_budget(i); b && b->kv_cache_bytes <= 0)
        throw std::invalid_argument(resolve_model_config(spec_.model).name + " does not fit on " + spec_.sim_device.name +
                                    " x" + std::to_string(spec_.tensor_parallel) + " at gpu_memory_utilization " +
                                    std::to_string(*scenario_.capacity->gpu_memory_utilization) +
                                    ": weights and activations leave no KV memory");
  }
}

PointRunner::~PointRunner() = default;

std::unique_ptr<Backend> PointRunner::make_backend_instance(size_t strategy) const {
  const StrategySpec& st = scenario_.strategies.at(strategy);
  return backends_->make(strategy_quantization(scenario_, st), strategy_kv_cache_dtype(scenario_, st));
}

std::optional<KvBudget> PointRunner::kv_budget(size_t strategy) const {
  if (scenario_.target) return std::nullopt;
  if (spec_.kind != BackendKind::sim || !scenario_.capacity || !scenario_.capacity->gpu_memory_utilization)
    return std::nullopt;
  const StrategySpec& st = scenario_.strategies.at(strategy);
  const int rows = max_step_rows(scenario_, st), seqs = max_step_seqs(st);
  const ModelConfig model = resolve_model_config(spec_.model);
  const SimDevice device = sim_device_for(spec_);
  KvBudget b =
      servelab::kv_budget(model, device, spec_.tensor_parallel, *scenario_.capacity->gpu_memory_utilization, rows, seqs);
  // The strategy's formats: quantized Linears leave their saved bytes to the KV arena; an fp8 KV
  // slot is 1 byte an element plus its scales.
  const QuantScheme scheme = scheme_for_model(strategy_quantization(scenario_, st), model, spec_.fp8_per_channel);
  if (scheme.quantized()) {
    const double tp = spec_.tensor_parallel;
    const double saved = (double(linear_weight_bytes(model, QuantScheme{})) / 2.0 * device.weight_dtype_bytes -
                          double(linear_weight_bytes(model, scheme))) / tp;
    b.weight_bytes -= saved;
    b.kv_cache_bytes = static_cast<int64_t>(b.usable_bytes - b.weight_bytes - b.activation_bytes);
  }
  if (strategy_kv_cache_dtype(scenario_, st) == KvCacheDType::fp8) {  // the slot the sim's engine sizes its arena by
    BackendSpec fp8 = spec_;
    fp8.kv_cache_dtype = KvCacheDType::fp8;
    fp8.sim_device = device;  // the profile's, found above: not read again
    fp8.sim_device_set = true;
    b.kv_bytes_per_token = kv_bytes_per_slot(fp8);
  }
  return b;
}

int64_t PointRunner::kv_cache_bytes(size_t strategy) const {
  if (auto b = kv_budget(strategy)) return b->kv_cache_bytes;
  if (scenario_.engine.gpu_memory_utilization > 0)  // cuda: what the GPU has left beside a backend
    return kv_cache_bytes_for(scenario_, scenario_.strategies.at(strategy), *make_backend_instance(strategy));
  return scenario_.engine.kv_cache_bytes;
}

namespace {

/// Labels `out` and returns sinks that keep its records (token times only when asked: without them
/// E2E falls back to end_s).
RecordSinks keep_records(PointRun& out, std::string label, size_t n_planned, const PointRunOptions& options) {
  out.label = std::move(label);
  out.records.reserve(n_planned);
  RecordSinks sinks;
  sinks.token_times = options.keep_token_times;  // the in-process driver leaves them out
  sinks.on_record = [&out, keep = options.keep_token_times](const RequestRecord& r) {
    out.records.push_back(r);
    if (!keep) std::vector<double>().swap(out.records.back().token_times_s);
  };
  return sinks;
}

}  // namespace

PointRun PointRunner::run(size_t strategy, double rate, const PointRunOptions& options) const {
  Scenario sc = scenario_;
  if (options.n_requests > 0) {
    sc.workload.n_requests = options.n_requests;
    sc.workload.duration_s = 0.0;
  }
  if (options.seed) sc.seed = *options.seed;
  // Prompts drawn as each request is sent rather than all held from the start: a probe of a
  // million requests would otherwise hold every prompt's ids (GBs, and the page faults to fill them).
  const StrategySpec& strat = sc.strategies.at(strategy);
  Plan plan = Planner(sc).make(rate, PlanPrompts::on_demand);
  if (strat.lora) draw_lora_adapters(plan, *strat.lora);
  std::optional<StructuredRequests> structured;  // the same requests carry the same schemas as in `run`
  if (structured_.schemas) structured.emplace(sc.workload.structured_output, structured_.schemas, plan.seed);
  if (sc.target) {  // the same plan over HTTP (loadgen/http_sweep.h)
    PointRun out;
    const RecordSinks sinks = keep_records(out, strat.label + "@" + format_rate(rate), plan.requests.size(), options);
    const auto t0 = std::chrono::steady_clock::now();
    out.stats = http_load::run_http_point(sc, strat, plan, out.label, sinks, target_tokenizer_.get(), "", nullptr,
                                         /*scrape_server_metrics=*/false, structured ? &*structured : nullptr);
    out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
  EngineConfig config = engine_config(sc, strat);
  PointRun out;
  std::unique_ptr<Backend> backend = make_backend_instance(strategy);
  if (auto b = kv_budget(strategy)) config.kv_cache_bytes = b->kv_cache_bytes;
  else config.kv_cache_bytes = kv_cache_bytes_for(sc, strat, *backend);
  if (options.predict_with && sc.backend.kind != BackendKind::sim)
    backend = measuring_backend(std::move(backend), out.step_timings);
  Engine engine(config, std::move(backend));
  apply_strategy(engine, strat, *backends_);
  // The source takes the plan rather than a copy. The sinks' needs are kept first.
  const size_t n_planned = plan.requests.size();
  std::vector<char> warmup(n_planned);
  for (size_t i = 0; i < n_planned; ++i) warmup[i] = plan.requests[i].warmup;
  std::unique_ptr<RequestSource> source =
      make_source(sc, std::move(plan), run_adapters(sc, strat, engine.backend()));
  StructuredSource* constrained = nullptr;
  if (structured) {
    auto wrapped = std::make_unique<StructuredSource>(std::move(source), *structured, *structured_.compiler);
    constrained = wrapped.get();
    source = std::move(wrapped);
  }
  std::unique_ptr<Clock> clock;
  if (sc.backend.kind == BackendKind::sim) clock = std::make_unique<VirtualClock>();
  else clock = std::make_unique<SteadyClock>();

  RecordSinks sinks = keep_records(out, strat.label + "@" + format_rate(rate), n_planned, options);
  if (constrained) sinks.annotate = [constrained](const FinishedRequest& f, RequestRecord& r) { constrained->annotate(f, r); };
  if (options.keep_steps) sinks.on_step = [&](const StepRecord& s) { out.steps.push_back(s); };
  const auto t0 = std::chrono::steady_clock::now();
  out.stats = drive_in_process(engine, *source, *clock, out.label, sinks,
                               [&warmup](uint64_t id) { return id < warmup.size() && warmup[id] != 0; });
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.cost_counts = engine.backend().priced_steps();
  // Priced after the run, off its critical path (measuring_backend.h).
  if (options.predict_with && sc.backend.kind != BackendKind::sim)
    price_step_timings(out.step_timings, *options.predict_with, engine.backend().config());
  return out;
}

}  // namespace servelab
