#pragma once
// DraftPricer: prices the steps of a speculative draft model (a `self` draft of the target's first
// layers, or a smaller `draft_model`) on the device the target's cost model describes. The
// roofline prices any model directly; a profile was measured for the target's shape only, so a
// draft step is the profile's price of that step on the target, times the roofline's ratio
// draft / target for the same step (the same scaling StepPricer applies to other weight formats).
#include "engine/backend/cost_model.h"

namespace servelab {

class DraftPricer {
 public:
  /// Holds a reference to `cost`: it must outlive the pricer and stay unchanged. Throws
  /// std::invalid_argument when either model is invalid.
  DraftPricer(const SimCostModel& cost, const ModelConfig& target, const ModelConfig& draft);
  DraftPricer(const DraftPricer&) = delete;  // the pricers point into target_ and draft_
  DraftPricer& operator=(const DraftPricer&) = delete;

  /// Predicted seconds of one draft step of `shape` (its forward alone: no host overhead).
  double seconds(const StepShape& shape) const;
  const ModelConfig& draft() const { return draft_; }

 private:
  const SimCostModel& cost_;
  ModelConfig target_, draft_;
  StepPricer target_pricer_;
  RooflineTerms target_terms_, draft_terms_;
};

}  // namespace servelab
