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
    out_.push_back({measured, 0.0, shape});
    return r;
  }

 private:
  std::vector<StepTiming>& out_;
};

}  // namespace

std::unique_ptr<Backend> measuring_backend(std::unique_ptr<Backend> inner, std::vector<StepTiming>& out) {
  return std::make_unique<MeasuringBackend>(std::move(inner), out);
}

void price_step_timings(std::vector<StepTiming>& timings, const SimCostModel& cost, const ModelConfig& model) {
  for (StepTiming& t : timings) t.predicted_s = cost.step_seconds(model, t.shape);
}

}  // namespace servelab
