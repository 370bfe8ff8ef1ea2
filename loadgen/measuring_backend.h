#pragma once
// A real backend wrapped so that every step's wall time is recorded beside what a cost model
// predicts for the same shape: validate-sim's step-level error, apart from queueing.
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cost_model.h"

namespace servelab {

/// One real step next to the cost model's price for its shape.
struct StepTiming {
  double measured_s = 0.0;
  double predicted_s = 0.0;
  StepShape shape;  ///< what was priced
};

/// Runs `inner` and appends, for every forward(), its wall time (forward() only, as the profiler
/// measures it) and `cost`'s price for the step's shape to `out`. Everything else (reserve_steps,
/// decode_row_buckets, KV copies and swaps) goes straight to `inner`, so the wrapped backend runs
/// exactly as it runs unwrapped. `cost` and `out` must outlive the wrapper.
std::unique_ptr<Backend> measuring_backend(std::unique_ptr<Backend> inner, const SimCostModel& cost,
                                           std::vector<StepTiming>& out);

}  // namespace servelab
