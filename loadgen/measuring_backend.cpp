#include "loadgen/measuring_backend.h"

#include <chrono>
#include <optional>

#include "engine/backend/forwarding_backend.h"
#include "engine/backend/sim_sustained.h"

namespace servelab {
namespace {

class MeasuringBackend final : public ForwardingBackend {
 public:
  MeasuringBackend(std::unique_ptr<Backend> inner, std::vector<StepTiming>& out)
      : ForwardingBackend(std::move(inner)), out_(out), origin_(std::chrono::steady_clock::now()) {}
  StepOutput execute(const Step& step) override {
    const StepShape shape = StepShape::of(step);
    const auto t0 = std::chrono::steady_clock::now();
    StepOutput r = inner().execute(step);
    const double measured = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out_.push_back({measured, 0.0, std::chrono::duration<double>(t0 - origin_).count(), shape,
                    lora_params_.empty() ? std::vector<LoraRows>{} : lora_rows_of(step, lora_params_)});
    return r;
  }
  void load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) override {
    if (slot >= 0 && size_t(slot) >= lora_params_.size()) lora_params_.resize(size_t(slot) + 1, 0);
    if (slot >= 0) lora_params_[size_t(slot)] = lora_params(config(), adapter.get());
    ForwardingBackend::load_lora(slot, std::move(adapter));
  }

 private:
  std::vector<StepTiming>& out_;
  std::chrono::steady_clock::time_point origin_;
  std::vector<int64_t> lora_params_;  // each slot's adapter's parameters (0: empty)
};

}  // namespace

std::unique_ptr<Backend> measuring_backend(std::unique_ptr<Backend> inner, std::vector<StepTiming>& out) {
  return std::make_unique<MeasuringBackend>(std::move(inner), out);
}

void price_step_timings(std::vector<StepTiming>& timings, const SimCostModel& cost, const ModelConfig& model) {
  const StepPricer pricer(cost, model);
  std::optional<RooflineTerms> terms;
  std::optional<SustainedState> load;
  if (cost.sustained) {
    terms = RooflineTerms::of(model, cost.device, cost.tensor_parallel);
    load.emplace(*cost.sustained, *terms);
  }
  for (StepTiming& t : timings) {
    double s = pricer.seconds(t.shape);
    if (load) s = load->price(t.start_s, s, t.shape, t.measured_s);  // the state follows the real steps
    t.predicted_s = s + lora_rows_seconds(cost.device, model, t.lora);
  }
}

}  // namespace servelab
