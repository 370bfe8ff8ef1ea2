#pragma once
// Sweep: one in-process run per rate × strategy of a scenario, the same plan for every strategy
// at a rate, records and step records streamed to DIR/records.jsonl and DIR/steps.jsonl as they
// happen (flushed per line, so an interrupted or crashed run keeps everything it finished).
#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/format_accuracy.h"
#include "engine/model/tokenizer.h"
#include "loadgen/inprocess_driver.h"
#include "loadgen/records/rate.h"
#include "loadgen/records/roofline_record.h"  // format_rate: run labels "<strategy>@<rate>"
#include "loadgen/plan.h"
#include "loadgen/scenario.h"

namespace servelab {

/// One point of the sweep.
struct SweepRun {
  std::string label;     ///< records' "run": "<strategy>@<rate>" (open loop), "<strategy>@c<N>", "<strategy>@trace"
  std::string strategy;  ///< the strategy's label
  std::string batching;  ///< static | dynamic | continuous
  std::string kv;        ///< naive | paged
  std::string backend;   ///< cpu | sim
  double rate = 0.0;     ///< offered requests/s; 0 for closed loop and trace
  int n_planned = 0;     ///< measured requests planned (warm-up excluded)
  int n_warmup = 0;
  nlohmann::ordered_json config;  ///< the strategy's knobs, for reports
  size_t strategy_index = 0;
  std::string point;     ///< the sweep point's label (label without the repetition suffix)
  int repeat = 1;        ///< which repetition of the point (1-based)
  int n_repeats = 1;     ///< workload.repeat
  uint64_t seed = 0;     ///< the plan seed of this repetition (repeat_seed)
};

struct SweepOptions {
  std::string out_dir;
  const std::atomic<bool>* stop = nullptr;   ///< Ctrl-C: abort the run in flight, skip the rest
  std::function<void(const SweepRun&)> on_run_start;
  std::function<void(const SweepRun&, const RequestRecord&)> on_record;
  std::function<void(const SweepRun&, const DriveStats&)> on_run_done;
  /// Loads target.tokenizer (a model folder) for scenarios with `target:` (HTTP runs).
  std::function<std::unique_ptr<Tokenizer>(const std::string& dir)> load_tokenizer;
  /// Hears each storage format as its accuracy is measured, before the first run (format_accuracy.h).
  std::function<void(const std::string& format)> on_accuracy;
  /// HTTP runs: scrape the server's /metrics into out_dir/server_metrics.jsonl during each run.
  bool scrape_server_metrics = false;
};

struct SweepOutcome {
  std::vector<SweepRun> runs;          ///< every planned point, in sweep order
  std::vector<RequestRecord> records;  ///< what was written to records.jsonl
  std::vector<StepRecord> steps;       ///< what was written to steps.jsonl
  /// Real backends: the ceilings every step's roofline was priced at (loadgen/roofline_meter.h),
  /// the same for every run of the sweep; unset on the sim, over HTTP, or with roofline_note.
  std::optional<RooflineCeilings> roofline_ceilings;
  std::string roofline_note;           ///< why a real run has no rooflines ("" otherwise)
  /// In-process: what each strategy's storage formats cost in accuracy, by strategy label
  /// (loadgen/format_accuracy.h); strategies in the model's own formats are absent.
  std::map<std::string, analysis::FormatAccuracy> accuracy;
  bool interrupted = false;
};

/// Step records a run of `plan` is given room for before it starts (a real backend's run: growing
/// the sweep's records mid-run moved every earlier one, a pause of ~10 ms on the host at 32k
/// steps, which the report's host pauses showed): one a planned output token plus two a request
/// and one per 128 prompt tokens (its prefill, in chunks), at most 2^20.
size_t planned_step_room(const Plan& plan);

/// The sweep's points (labels, knobs, planned counts) without running anything. Pass the
/// Planner the run will use, so a dataset or trace is read once per run, not once per call.
std::vector<SweepRun> plan_sweep(const Planner& planner);
/// plan_sweep(Planner(scenario)): reads the scenario's dataset or trace.
std::vector<SweepRun> plan_sweep(const Scenario& scenario);

/// Every check a run makes before its first request, without running: in-process, the backend is
/// built (weights loaded and checked, a sim profile read and matched to the model, a CUDA device
/// found) and every strategy's engine with its KV arena (which must fit this machine's memory on
/// the CPU backend); with `target:`, the tokenizer folder. Throws std::exception with the
/// message the run would have stopped with.
void check_runnable(const Scenario& scenario);

/// Runs every point: rates in order, every strategy at each rate; with workload.repeat N, each
/// rate's strategies N times over, repetition k planned with repeat_seed(seed, k) and labelled
/// "<point>#k" (the same plan for every strategy within a repetition). The cpu backend's weights are
/// built once (random from the preset and seed, or loaded) and shared by every run; each run gets
/// a fresh engine and arena. cpu runs on the steady clock (real time), sim on a virtual clock.
/// Plans come from `planner` (its scenario is the one run), so the dataset or trace it loaded is
/// not read again. Throws std::runtime_error when the output folder or model cannot be opened.
SweepOutcome run_sweep(const Planner& planner, const SweepOptions& options);
/// run_sweep(Planner(scenario), options).
SweepOutcome run_sweep(const Scenario& scenario, const SweepOptions& options);

}  // namespace servelab
