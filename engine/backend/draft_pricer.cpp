#include "engine/backend/draft_pricer.h"

namespace servelab {

DraftPricer::DraftPricer(const SimCostModel& cost, const ModelConfig& target, const ModelConfig& draft)
    : cost_(cost),
      target_((target.validate(), target)),
      draft_((draft.validate(), draft)),
      target_pricer_(cost_, target_),
      target_terms_(RooflineTerms::of(target_, cost_.device, cost_.tensor_parallel, cost_.formats)),
      draft_terms_(RooflineTerms::of(draft_, cost_.device, 1, {})) {
  if (cost_.kind != SimCostModel::Kind::profile) return;
  const std::string hash = model_shape_hash(draft_);
  for (const SimCostModel::DraftProfile& d : cost_.draft_profiles) {
    if (d.shape_hash != hash) continue;
    SimCostModel own;  // the draft's profile on the target's device, one GPU, its native formats
    own.kind = SimCostModel::Kind::profile;
    own.device = cost_.device;
    own.profiled = d.profiled;
    own.scale = cost_.scale;
    own.source = cost_.source + " (draft " + d.name + ")";
    draft_cost_ = std::move(own);
    draft_pricer_.emplace(*draft_cost_, draft_);
    return;
  }
}

double DraftPricer::seconds(const StepShape& shape) const {
  if (cost_.kind == SimCostModel::Kind::roofline || !cost_.profiled)
    return cost_.scale * roofline_seconds(draft_terms_, shape);
  if (draft_pricer_) return draft_pricer_->seconds(shape);
  // The target's profile at this shape, scaled to the draft by the roofline.
  return target_pricer_.seconds(shape) * roofline_seconds(draft_terms_, shape) / roofline_seconds(target_terms_, shape);
}

}  // namespace servelab
