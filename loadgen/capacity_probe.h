#pragma once
// One strategy at one rate, run in memory with no files written: the probe of `servelab
// capacity` and the runs `servelab validate-sim` compares. The scenario's `capacity:` section
// applies here: tensor_parallel for the sim backend, and gpu_memory_utilization sizing the KV
// arena from the device's memory (engine/backend/hardware.h).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/cost_model.h"
#include "engine/backend/hardware.h"
#include "engine/backend/make_backend.h"
#include "engine/model/tokenizer.h"
#include "loadgen/inprocess_driver.h"
#include "loadgen/measuring_backend.h"
#include "loadgen/records/record.h"
#include "loadgen/records/step_record.h"
#include "loadgen/scenario.h"
#include "loadgen/structured_source.h"

namespace servelab {


/// What to keep of a point run.
struct PointRunOptions {
  int n_requests = 0;            ///< measured requests; 0 = the scenario's
  bool keep_token_times = false; ///< false: records keep only first_token_s and end_s (TTFT, TPOT and
                                 ///< E2E stay exact; ITL is not needed and a 100k-request run stays small)
  bool keep_steps = false;       ///< collect StepRecords
  /// Real backends: also price every step's shape with this cost model and keep (measured,
  /// predicted) per step: the sim's step-level error, apart from queueing.
  const SimCostModel* predict_with = nullptr;
  /// The plan's seed instead of the scenario's (a repetition's: repeat_seed); weights keep theirs.
  std::optional<uint64_t> seed;
};


/// The result of one point.
struct PointRun {
  std::string label;                   ///< "<strategy>@<rate>"
  std::vector<RequestRecord> records;
  std::vector<StepRecord> steps;       ///< when keep_steps
  DriveStats stats;
  double wall_s = 0.0;                 ///< wall time of the run (planning excluded)
  std::optional<CostCounts> cost_counts;  ///< sim backend: how its steps were priced
  std::vector<StepTiming> step_timings;   ///< with predict_with on a real backend
};

/// Builds backends once per scenario (cpu weights are drawn or loaded once and shared) and runs
/// points on them: sim on a virtual clock, cpu on the steady clock. A scenario with `target:` runs
/// its points over HTTP against that server instead (loadgen/http, as `servelab run` does; no
/// engine is built, steps and step timings stay empty).
class PointRunner {
 public:
  /// Throws std::runtime_error / std::invalid_argument on a model or profile that cannot load,
  /// or a device whose memory cannot hold the model (gpu_memory_utilization).
  explicit PointRunner(const Scenario& scenario);
  ~PointRunner();

  PointRun run(size_t strategy, double rate, const PointRunOptions& options = {}) const;

  /// The KV arena a strategy runs with (engine.kv_cache_bytes, or derived from GPU memory).
  int64_t kv_cache_bytes(size_t strategy) const;
  /// The memory split behind it when capacity.gpu_memory_utilization is set on a sim backend.
  std::optional<KvBudget> kv_budget(size_t strategy) const;
  const Scenario& scenario() const { return scenario_; }
  const BackendSpec& backend_spec() const { return spec_; }

 private:
  /// A backend in strategy `strategy`'s storage formats.
  std::unique_ptr<Backend> make_backend_instance(size_t strategy = 0) const;
  Scenario scenario_;
  BackendSpec spec_;
  std::unique_ptr<BackendFactory> backends_;
  std::unique_ptr<Tokenizer> target_tokenizer_;  ///< target.tokenizer, loaded once
  /// workload.structured_output: the probes send the same constraints `servelab run` does
  /// (compiled once, shared by every probe).
  StructuredSetup structured_;
};

}  // namespace servelab
