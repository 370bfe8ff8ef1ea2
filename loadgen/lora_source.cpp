#include "loadgen/lora_source.h"

#include <stdexcept>

#include "engine/lora/lora_adapter.h"

namespace servelab {

LoraSource::LoraSource(std::unique_ptr<RequestSource> inner, const Plan& plan,
                       const std::vector<std::shared_ptr<const LoraAdapter>>& adapters)
    : inner_(std::move(inner)) {
  std::unordered_map<std::string, std::shared_ptr<const LoraAdapter>> by_name;
  for (const auto& a : adapters) by_name[a->name] = a;
  for (const PlannedRequest& r : plan.requests) {
    if (r.id >= by_id_.size()) by_id_.resize(r.id + 1);
    if (r.lora.empty()) continue;
    auto it = by_name.find(r.lora);
    if (it == by_name.end()) throw std::invalid_argument("plan names LoRA adapter '" + r.lora + "', which the run does not have");
    by_id_[r.id] = it->second;
  }
}

Request LoraSource::take() {
  Request r = inner_->take();
  if (r.id < by_id_.size()) r.lora = by_id_[r.id];
  return r;
}

}  // namespace servelab
