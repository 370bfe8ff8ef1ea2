#pragma once
// A real backend wrapped so that every step's wall time is recorded beside what a cost model
// predicts for the same shape: validate-sim's step-level error, apart from queueing.
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cost_model.h"
#include "engine/backend/sim_lora.h"

namespace servelab {

/// One real step next to the cost model's price for its shape.
struct StepTiming {
  double measured_s = 0.0;
  double predicted_s = 0.0;
  /// When the step began, seconds since the wrapper was made (-1: not known; pricing then takes
  /// the step to start as the one before it ended).
  double start_s = -1.0;
  StepShape shape;  ///< what was priced
  /// Its entries that ran an adapter (multi-LoRA), priced by the sim's LoRA terms
  /// (engine/backend/sim_lora.h) beside the shape; empty without adapters.
  std::vector<LoraRows> lora;
};

/// Runs `inner` and appends, for every forward(), its wall time (forward() only, as the profiler
/// measures it) and the step's shape to `out`, unpriced (predicted_s 0): pricing a shape from a
/// profile takes tens to hundreds of microseconds, which on the run's critical path would slow the
/// very run it is compared with (every step's successor would start that much later). Price them
/// after the run with price_step_timings. Everything else (reserve_steps, decode_row_buckets, KV
/// copies and swaps) goes straight to `inner`, so the wrapped backend runs exactly as it runs
/// unwrapped. `out` must outlive the wrapper.
std::unique_ptr<Backend> measuring_backend(std::unique_ptr<Backend> inner, std::vector<StepTiming>& out);

/// Sets every timing's predicted_s to `cost`'s price of its shape on `model`, plus its adapters'
/// (lora_rows_seconds on cost.device), as the sim backend prices a step. With a sustained-load
/// probe in the cost model (engine/backend/sim_sustained.h) the timings are priced in order, each
/// at the load of the real steps before it (their start_s and measured times).
void price_step_timings(std::vector<StepTiming>& timings, const SimCostModel& cost, const ModelConfig& model);

}  // namespace servelab
