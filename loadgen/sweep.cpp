#include "loadgen/sweep.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/make_backend.h"
#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/model/memory_check.h"
#include "engine/model/tokenizer.h"
#include "engine/model/weights.h"
#include "loadgen/backend_spec.h"
#include "loadgen/format_accuracy.h"
#include "loadgen/http_sweep.h"
#include "loadgen/plan.h"
#include "loadgen/roofline_meter.h"
#include "loadgen/sources.h"
#include "loadgen/structured_source.h"

namespace servelab {

namespace {

nlohmann::ordered_json strategy_knobs(const StrategySpec& s) {
  nlohmann::ordered_json j;
  j["batching"] = to_string(s.sched.kind);
  switch (s.sched.kind) {
    case BatchingKind::static_batch:
      j["batch_size"] = s.sched.batch_size;
      j["max_wait_ms"] = s.sched.max_wait_ms;
      break;
    case BatchingKind::dynamic_batch:
      j["max_batch_size"] = s.sched.max_batch_size;
      j["max_queue_delay_ms"] = s.sched.max_queue_delay_ms;
      break;
    case BatchingKind::continuous:
      j["max_num_seqs"] = s.sched.max_num_seqs;
      j["max_num_batched_tokens"] = s.sched.max_num_batched_tokens;
      j["chunked_prefill"] = s.sched.chunked_prefill;
      j["preemption"] = to_string(s.sched.preempt);
      break;
  }
  if (s.lora) {  // its own adapters (strategy_lora); workload.lora's are the scenario's
    j["lora_adapters"] = s.lora->adapters.size();
    if (s.lora->enabled()) j["max_loras"] = s.lora->max_loras;
  }
  j["kv"] = to_string(s.kv.kind);
  if (s.kv.kind == KvKind::paged) {
    j["block_size"] = s.kv.block_size;
    j["prefix_caching"] = s.kv.prefix_caching;
  } else {
    j["reserve"] = to_string(s.kv.reserve);
  }
  return j;
}

/// What an HTTP run's reports say about its target, in place of engine knobs it does not have.
nlohmann::ordered_json target_knobs(const TargetSpec& t) {
  nlohmann::ordered_json j;
  j["urls"] = t.urls;
  j["api"] = to_string(t.api);
  if (!t.model.empty()) j["model"] = t.model;
  return j;
}

std::string point_suffix(const Scenario& sc, double rate) {
  switch (sc.workload.mode) {
    case LoadMode::open_loop: return "@" + format_rate(rate);
    case LoadMode::closed_loop: return "@c" + std::to_string(rate >= 1 ? static_cast<int>(rate) : sc.workload.concurrency);
    case LoadMode::trace: return "@trace";
  }
  return "";
}

/// Appends lines to a file, flushing each so nothing finished is lost.
class LineWriter {
 public:
  explicit LineWriter(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
    if (!out_) throw std::runtime_error(path + ": cannot write");
  }
  void write(const std::string& line) {
    out_ << line;
    out_.flush();
    if (!out_) throw std::runtime_error(path_ + ": write failed");
  }

 private:
  std::string path_;
  std::ofstream out_;
};


/// The engine of one run, as every run builds it. The CPU backend keeps the KV arena in this
/// machine's memory beside its fp32 weights: an arena that cannot fit is refused here with the
/// figures, not by the allocator (or the OOM killer) mid-run.
/// With `roofline` (real backends), every step's roofline is recorded (loadgen/roofline_meter.h).
std::unique_ptr<Engine> make_engine(const Scenario& sc, const StrategySpec& strategy, const BackendFactory& backends,
                                    RooflineRecorder* roofline = nullptr) {
  const Quantization quantization = strategy_quantization(sc, strategy);
  const KvCacheDType kv_cache_dtype = strategy_kv_cache_dtype(sc, strategy);
  std::unique_ptr<Backend> backend = backends.make(quantization, kv_cache_dtype);
  if (roofline) backend = roofline->wrap(std::move(backend), backends.formats(quantization, kv_cache_dtype));
  EngineConfig cfg = engine_config(sc, strategy);
  cfg.kv_cache_bytes = kv_cache_bytes_for(sc, strategy, *backend);
  if (sc.backend.kind == BackendKind::cpu) {
    const int64_t memory = physical_memory_bytes();
    const double weights = fp32_weight_bytes(resolve_model_config(sc.model.path.empty() ? sc.model.preset : sc.model.path));
    if (memory > 0 && static_cast<double>(cfg.kv_cache_bytes) + weights > static_cast<double>(memory)) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "engine.kv_cache_bytes: strategy %s: a KV arena of %.1f GiB beside %.1f GiB of fp32 weights "
                    "exceeds this machine's %.1f GiB of memory",
                    strategy.label.c_str(), cfg.kv_cache_bytes / 1073741824.0, weights / 1073741824.0,
                    memory / 1073741824.0);
      throw std::runtime_error(buf);
    }
  }
  auto engine = std::make_unique<Engine>(cfg, std::move(backend));
  apply_strategy(*engine, strategy, backends);
  return engine;
}

}  // namespace

void check_runnable(const Scenario& scenario) {
  if (scenario.target) {
    if (!scenario.target->tokenizer.empty() &&
        !std::filesystem::exists(std::filesystem::path(scenario.target->tokenizer) / "tokenizer.json"))
      throw std::runtime_error("target.tokenizer: " + scenario.target->tokenizer + " holds no tokenizer.json");
    return;
  }
  const BackendFactory backends(backend_spec(scenario));  // loads the weights (cpu), the profile (sim), the device (cuda)
  for (const StrategySpec& st : scenario.strategies) make_engine(scenario, st, backends);
}

std::vector<SweepRun> plan_sweep(const Scenario& scenario) { return plan_sweep(Planner(scenario)); }

namespace {

/// One Planner per repetition: the given one for repetition 1, the scenario re-seeded after.
class RepeatPlanners {
 public:
  explicit RepeatPlanners(const Planner& first) : first_(first) {
    const Scenario& sc = first.scenario();
    for (int k = 2; k <= std::max(1, sc.workload.repeat); ++k) {
      Scenario copy = sc;
      copy.seed = repeat_seed(sc.seed, k);
      more_.push_back(std::make_unique<Planner>(copy));
    }
  }
  int size() const { return 1 + static_cast<int>(more_.size()); }
  const Planner& at(int k) const { return k <= 1 ? first_ : *more_[static_cast<size_t>(k - 2)]; }

 private:
  const Planner& first_;
  std::vector<std::unique_ptr<Planner>> more_;
};

std::string repetition_suffix(int k, int n) {
  if (n <= 1) return "";
  std::string s = std::to_string(k);  // (not "#" + ...: GCC 12 warns falsely about that insert)
  s.insert(s.begin(), '#');
  return s;
}

}  // namespace

std::vector<SweepRun> plan_sweep(const Planner& planner) {
  const Scenario& scenario = planner.scenario();
  const RepeatPlanners planners(planner);
  const int n_rep = planners.size();
  std::vector<SweepRun> runs;
  for (double rate : scenario.sweep_rates()) {
    for (int k = 1; k <= n_rep; ++k) {
      const Plan plan = planners.at(k).make(rate);
      for (size_t i = 0; i < scenario.strategies.size(); ++i) {
        const StrategySpec& s = scenario.strategies[i];
        SweepRun r;
        r.strategy = s.label;
        r.point = s.label + point_suffix(scenario, rate);
        r.label = r.point + repetition_suffix(k, n_rep);
        r.repeat = k;
        r.n_repeats = n_rep;
        r.seed = repeat_seed(scenario.seed, k);
        if (scenario.target) {  // the server under test: its batching and KV are not ours to name
          r.backend = "http";
        } else {
          r.batching = to_string(s.sched.kind);
          r.kv = to_string(s.kv.kind);
          r.backend = to_string(scenario.backend.kind);
        }
        r.rate = scenario.workload.mode == LoadMode::open_loop ? rate : 0.0;
        r.n_planned = plan.n_measured();
        r.n_warmup = plan.n_warmup;
        r.config = scenario.target ? target_knobs(*scenario.target) : strategy_knobs(s);
        if (scenario.workload.mode == LoadMode::closed_loop) r.config["concurrency"] = plan.concurrency;
        if (plan.max_concurrency > 0) r.config["max_concurrency"] = plan.max_concurrency;
        if (plan.ramp_to > 0) r.config["ramp_to"] = plan.ramp_to;
        r.strategy_index = i;
        runs.push_back(std::move(r));
      }
    }
  }
  return runs;
}

SweepOutcome run_sweep(const Scenario& scenario, const SweepOptions& options) {
  return run_sweep(Planner(scenario), options);
}

SweepOutcome run_sweep(const Planner& planner, const SweepOptions& options) {
  const Scenario& scenario = planner.scenario();
  namespace fs = std::filesystem;
  fs::create_directories(options.out_dir);
  // steps.jsonl before records.jsonl: a run killed at any moment leaves records.jsonl only beside
  // its steps.jsonl, which `servelab report` needs for an in-process run (a kill between the two
  // opens once left a records.jsonl the report refused: KillNine, kill after 0 records).
  LineWriter steps_out(options.out_dir + "/steps.jsonl");
  LineWriter records_out(options.out_dir + "/records.jsonl");

  SweepOutcome outcome;
  outcome.runs = plan_sweep(planner);
  std::optional<BackendFactory> backends;  // no engine when the runs go to a server (target:)
  if (!scenario.target) {
    backends.emplace(backend_spec(scenario));
    outcome.accuracy = measure_strategy_accuracy(scenario, *backends, options.on_accuracy);
  }
  // Real backends: each step's roofline beside its measured time (the sim's times are priced).
  std::optional<RooflineRecorder> roofline;
  if (!scenario.target && scenario.backend.kind != BackendKind::sim)
    roofline.emplace(scenario.backend.kind, scenario.backend.ceilings, scenario.backend.threads,
                     backend_spec(scenario).tensor_parallel);
  std::unique_ptr<Tokenizer> target_tokenizer;
  if (scenario.target && !scenario.target->tokenizer.empty()) {
    if (!options.load_tokenizer) throw std::runtime_error("target.tokenizer is set but no tokenizer loader was given");
    target_tokenizer = options.load_tokenizer(scenario.target->tokenizer);
  }

  // Structured output: one schema set for the whole sweep, written beside the records (a record's
  // "schema" indexes schemas.jsonl); in-process, compiled once against the model's tokenizer.
  const StructuredOutputSpec& so = scenario.workload.structured_output;
  const StructuredSetup structured_setup = make_structured_setup(scenario);
  const std::shared_ptr<const SchemaSet>& schemas = structured_setup.schemas;
  SchemaCompiler* schema_compiler = structured_setup.compiler.get();
  if (schemas) {
    LineWriter schemas_out(options.out_dir + "/schemas.jsonl");
    for (const auto& t : schemas->texts) schemas_out.write(t + "\n");
  }

  const auto rates = scenario.sweep_rates();
  const RepeatPlanners planners(planner);
  size_t point = 0;
  for (double rate : rates) {
    for (int k = 1; k <= planners.size(); ++k) {
      // Each strategy's source copies the plan: prompts drawn as requests are sent keep that cheap.
      const Plan plan = planners.at(k).make(rate, PlanPrompts::on_demand);
      std::optional<StructuredRequests> structured;
      if (schemas) structured.emplace(so, schemas, plan.seed);
      for (size_t i = 0; i < scenario.strategies.size(); ++i, ++point) {
        if (options.stop && options.stop->load()) {
          outcome.interrupted = true;
          return outcome;
        }
        SweepRun& run = outcome.runs[point];
        if (options.on_run_start) options.on_run_start(run);
        if (scenario.target) {  // loadgen/http: the same plan and sinks, over HTTP
          RecordSinks http_sinks;
          http_sinks.on_record = [&](const RequestRecord& r) {
            records_out.write(record_line(r));
            outcome.records.push_back(r);
            if (options.on_record) options.on_record(run, r);
          };
          const DriveStats stats = http_load::run_http_point(scenario, scenario.strategies[i], plan, run.label,
                                                             http_sinks, target_tokenizer.get(),
                                                             options.out_dir, options.stop, options.scrape_server_metrics,
                                                             structured ? &*structured : nullptr);
          if (options.on_run_done) options.on_run_done(run, stats);
          if (stats.stopped) {
            outcome.interrupted = true;
            return outcome;
          }
          continue;
        }
        const std::unique_ptr<Engine> engine_ptr =
            make_engine(scenario, scenario.strategies[i], *backends, roofline ? &*roofline : nullptr);
        Engine& engine = *engine_ptr;
        // The arena it got (sized from gpu_memory_utilization on a GPU): the sim takes it to match.
        run.config["kv_cache_bytes"] = engine.config().kv_cache_bytes;
        if (roofline) {
          outcome.roofline_ceilings = roofline->ceilings();
          outcome.roofline_note = roofline->note();
        }
        std::unique_ptr<RequestSource> source =
            make_source(scenario, strategy_plan(plan, scenario.strategies[i]),
                        run_adapters(scenario, scenario.strategies[i], engine.backend()));
        StructuredSource* constrained = nullptr;
        if (structured) {
          auto wrapped = std::make_unique<StructuredSource>(std::move(source), *structured, *schema_compiler);
          constrained = wrapped.get();
          source = std::move(wrapped);
        }
        std::unique_ptr<Clock> clock;
        if (scenario.backend.kind == BackendKind::sim) clock = std::make_unique<VirtualClock>();
        else clock = std::make_unique<SteadyClock>();

        RecordSinks sinks;
        sinks.on_record = [&](const RequestRecord& r) {
          records_out.write(record_line(r));
          outcome.records.push_back(r);
          if (options.on_record) options.on_record(run, r);
        };
        sinks.on_step = [&](const StepRecord& s) {
          outcome.steps.push_back(s);
          if (roofline) outcome.steps.back().roofline = roofline->take();
          steps_out.write(step_line(outcome.steps.back()));
        };
        if (constrained)
          sinks.annotate = [constrained](const FinishedRequest& f, RequestRecord& r) { constrained->annotate(f, r); };
        if (!clock->is_virtual()) outcome.steps.reserve(outcome.steps.size() + planned_step_room(plan));
        const DriveStats stats = drive_in_process(
            engine, *source, *clock, run.label, sinks, [&plan](uint64_t id) { return plan.is_warmup(id); },
            options.stop);
        if (options.on_run_done) options.on_run_done(run, stats);
        if (stats.stopped) {
          outcome.interrupted = true;
          return outcome;
        }
      }
    }
  }
  return outcome;
}

size_t planned_step_room(const Plan& plan) {
  int64_t room = 0;
  for (const PlannedRequest& r : plan.requests) {
    const int64_t prompt = r.prompt.empty() ? r.recipe.n_own : int64_t(r.prompt.size());
    room += int64_t(r.output_tokens) + 2 + prompt / 128;  // a prefill in chunks of >= 128 tokens
  }
  return size_t(std::min<int64_t>(room, int64_t(1) << 20));
}

}  // namespace servelab
