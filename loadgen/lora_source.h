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
  /// fetched as its request is taken: kept ones at once, others drawn on the adapters' worker
  /// (lora_workload.h), the request ready() once its adapter is, and finish() attaching it.
  LoraSource(std::unique_ptr<RequestSource> inner, const Plan& plan, std::shared_ptr<WorkloadAdapters> adapters);
  std::optional<double> next_time() const override { return inner_->next_time(); }
  Request take() override;
  bool exhausted() const override { return inner_->exhausted(); }
  void on_finished(const FinishedRequest& r, double now) override { inner_->on_finished(r, now); }
  std::optional<double> held_until() const override { return inner_->held_until(); }
  bool ready(const Request& r) const override;
  /// On the sim (WorkloadAdapters::price_reads): a request naming an adapter not held is ready
  /// when the front end's one reader has read it, from the request's intended time on.
  std::optional<double> ready_at(const Request& r) const override;
  void finish(Request& r) override;

 private:
  std::unique_ptr<RequestSource> inner_;
  std::shared_ptr<WorkloadAdapters> adapters_;
  std::vector<std::string> by_id_;  // request id -> its adapter's name ("": the base model)
  std::unordered_map<uint64_t, WorkloadAdapters::Future> drawing_;  // request id -> its adapter under way
  std::unordered_map<uint64_t, double> read_at_;  // request id -> when its priced read ends
  double reader_free_at_ = 0.0;                   // the priced reads, one at a time
};

}  // namespace servelab
