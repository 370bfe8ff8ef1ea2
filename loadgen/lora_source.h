#pragma once
// LoraSource: hands out an inner source's requests with the adapter their plan names
// (PlannedRequest::lora) attached as Request::lora, for the in-process engine (which runs it) and
// the HTTP driver (which sends its name as the request's `model`).
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/runner.h"
#include "loadgen/lora_workload.h"
#include "loadgen/plan.h"

namespace servelab {

class LoraSource final : public RequestSource {
 public:
  /// adapters: every name the plan uses (std::invalid_argument naming a missing one), each
  /// fetched as its request is taken (an in-process run draws its weights then: lora_workload.h).
  LoraSource(std::unique_ptr<RequestSource> inner, const Plan& plan, std::shared_ptr<WorkloadAdapters> adapters);
  std::optional<double> next_time() const override { return inner_->next_time(); }
  Request take() override;
  bool exhausted() const override { return inner_->exhausted(); }
  void on_finished(const FinishedRequest& r, double now) override { inner_->on_finished(r, now); }
  std::optional<double> held_until() const override { return inner_->held_until(); }

 private:
  std::unique_ptr<RequestSource> inner_;
  std::shared_ptr<WorkloadAdapters> adapters_;
  std::vector<std::string> by_id_;  // request id -> its adapter's name ("": the base model)
};

}  // namespace servelab
