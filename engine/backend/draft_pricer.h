#pragma once
// DraftPricer: prices the steps of a speculative draft model (a `self` draft of the target's first
// layers, or a smaller `draft_model`) on the device the target's cost model describes. The
// roofline prices any model directly. With a profile: when the profile carries one of the draft
// itself (SimCostModel::draft_profiles, `servelab profile --draft-layers N`), from that; otherwise
// the target's profiled price of the same step times the roofline's ratio draft / target (the
// scaling StepPricer applies to other weight formats), a fallback that misses what the roofline
// does not see (a one-layer draft's weights staying in cache: on the CPU engine it prices tiny's
// one-layer draft ~25% high).
#include <optional>

#include "engine/backend/cost_model.h"

namespace servelab {

class DraftPricer {
 public:
  /// Holds a reference to `cost`: it must outlive the pricer and stay unchanged. Throws
  /// std::invalid_argument when either model is invalid.
  DraftPricer(const SimCostModel& cost, const ModelConfig& target, const ModelConfig& draft);
  DraftPricer(const DraftPricer&) = delete;  // the pricers point into target_, draft_ and draft_cost_
  DraftPricer& operator=(const DraftPricer&) = delete;

  /// Predicted seconds of one draft step of `shape` (its forward alone: no host overhead).
  double seconds(const StepShape& shape) const;
  const ModelConfig& draft() const { return draft_; }
  /// Whether the draft's steps are priced from a profile of the draft itself.
  bool draft_profiled() const { return draft_pricer_.has_value(); }

 private:
  const SimCostModel& cost_;
  ModelConfig target_, draft_;
  StepPricer target_pricer_;
  RooflineTerms target_terms_, draft_terms_;
  std::optional<SimCostModel> draft_cost_;  // the draft's own profile, when the cost model has one
  std::optional<StepPricer> draft_pricer_;
};

}  // namespace servelab
