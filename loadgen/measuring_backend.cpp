#include "loadgen/measuring_backend.h"

#include <chrono>

#include "engine/backend/forwarding_backend.h"

namespace servelab {
namespace {

class MeasuringBackend final : public ForwardingBackend {
 public:
  MeasuringBackend(std::unique_ptr<Backend> inner, std::vector<StepTiming>& out)
      : ForwardingBackend(std::move(inner)), out_(out) {}
  StepOutput execute(const Step& step) override {
    const StepShape shape = StepShape::of(step);
    const auto t0 = std::chrono::steady_clock::now();
    StepOutput r = inner().execute(step);
    const double measured = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out_.push_back({measured, 0.0, shape, lora_params_.empty() ? std::vector<LoraRows>{} : lora_rows_of(step, lora_params_)});
    return r;
  }
  void load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) override {
    if (slot >= 0 && size_t(slot) >= lora_params_.size()) lora_params_.resize(size_t(slot) + 1, 0);
    if (slot >= 0) lora_params_[size_t(slot)] = lora_params(config(), adapter.get());
    ForwardingBackend::load_lora(slot, std::move(adapter));
  }

 private:
  std::vector<StepTiming>& out_;
  std::vector<int64_t> lora_params_;  // each slot's adapter's parameters (0: empty)
};

}  // namespace

std::unique_ptr<Backend> measuring_backend(std::unique_ptr<Backend> inner, std::vector<StepTiming>& out) {
  return std::make_unique<MeasuringBackend>(std::move(inner), out);
}

void price_step_timings(std::vector<StepTiming>& timings, const SimCostModel& cost, const ModelConfig& model) {
  for (StepTiming& t : timings) t.predicted_s = cost.step_seconds(model, t.shape) + lora_rows_seconds(cost.device, model, t.lora);
}

}  // namespace servelab
