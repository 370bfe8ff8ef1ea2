#include "loadgen/lora_source.h"

#include <algorithm>
#include <chrono>
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
  const double intended = inner_->next_time().value_or(0.0);
  Request r = inner_->take();
  if (r.id >= by_id_.size() || by_id_[r.id].empty()) return r;
  const std::string& name = by_id_[r.id];
  r.lora_name = name;
  const bool fresh = !adapters_->holds(name);
  WorkloadAdapters::Future adapter = adapters_->fetch(name);
  if (fresh && adapters_->prices_reads()) {  // names only, ready at once: its read is priced
    reader_free_at_ = std::max(reader_free_at_, intended) + adapters_->read_seconds(*adapter.get());
    read_at_[r.id] = reader_free_at_;
  }
  if (adapter.wait_for(std::chrono::seconds(0)) == std::future_status::ready) r.lora = adapter.get();
  else drawing_[r.id] = std::move(adapter);
  return r;
}

bool LoraSource::ready(const Request& r) const {
  const auto at = drawing_.find(r.id);
  return at == drawing_.end() || at->second.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

std::optional<double> LoraSource::ready_at(const Request& r) const {
  const auto at = read_at_.find(r.id);
  if (at == read_at_.end()) return std::nullopt;
  return at->second;
}

void LoraSource::finish(Request& r) {
  read_at_.erase(r.id);
  const auto at = drawing_.find(r.id);
  if (at == drawing_.end()) return;
  WorkloadAdapters::Future adapter = std::move(at->second);
  drawing_.erase(at);
  r.lora = adapter.get();  // rethrows a failed draw
}

}  // namespace servelab
