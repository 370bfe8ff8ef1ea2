#include "loadgen/lora_source.h"

#include <stdexcept>

#include "engine/lora/lora_adapter.h"

namespace servelab {

LoraSource::LoraSource(std::unique_ptr<RequestSource> inner, const Plan& plan, std::shared_ptr<WorkloadAdapters> adapters)
    : inner_(std::move(inner)), adapters_(std::move(adapters)) {
  for (const PlannedRequest& r : plan.requests) {
    if (r.id >= by_id_.size()) by_id_.resize(r.id + 1);
    if (r.lora.empty()) continue;
    if (!adapters_->has(r.lora))
      throw std::invalid_argument("plan names LoRA adapter '" + r.lora + "', which the run does not have");
    by_id_[r.id] = r.lora;
  }
}

Request LoraSource::take() {
  Request r = inner_->take();
  if (r.id < by_id_.size() && !by_id_[r.id].empty()) r.lora = adapters_->get(by_id_[r.id]);
  return r;
}

}  // namespace servelab
