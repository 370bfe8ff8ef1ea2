#include "engine/backend/draft_pricer.h"

namespace servelab {

DraftPricer::DraftPricer(const SimCostModel& cost, const ModelConfig& target, const ModelConfig& draft)
    : cost_(cost),
      target_((target.validate(), target)),
      draft_((draft.validate(), draft)),
      target_pricer_(cost_, target_),
      target_terms_(RooflineTerms::of(target_, cost_.device, cost_.tensor_parallel, cost_.formats)),
      draft_terms_(RooflineTerms::of(draft_, cost_.device, 1, {})) {}

double DraftPricer::seconds(const StepShape& shape) const {
  if (cost_.kind == SimCostModel::Kind::roofline || !cost_.profiled)
    return cost_.scale * roofline_seconds(draft_terms_, shape);
  // The target's profile at this shape, scaled to the draft by the roofline.
  return target_pricer_.seconds(shape) * roofline_seconds(draft_terms_, shape) / roofline_seconds(target_terms_, shape);
}

}  // namespace servelab
