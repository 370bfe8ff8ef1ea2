#include "loadgen/measuring_backend.h"

#include <chrono>

#include "engine/backend/forwarding_backend.h"

namespace servelab {
namespace {

class MeasuringBackend final : public ForwardingBackend {
 public:
  MeasuringBackend(std::unique_ptr<Backend> inner, const SimCostModel& cost, std::vector<StepTiming>& out)
      : ForwardingBackend(std::move(inner)), cost_(cost), out_(out) {}
  StepOutput execute(const Step& step) override {
    const StepShape shape = StepShape::of(step);
    const auto t0 = std::chrono::steady_clock::now();
    StepOutput r = inner().execute(step);
    const double measured = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out_.push_back({measured, cost_.step_seconds(config(), shape), shape});
    return r;
  }

 private:
  const SimCostModel& cost_;
  std::vector<StepTiming>& out_;
};

}  // namespace

std::unique_ptr<Backend> measuring_backend(std::unique_ptr<Backend> inner, const SimCostModel& cost,
                                           std::vector<StepTiming>& out) {
  return std::make_unique<MeasuringBackend>(std::move(inner), cost, out);
}

}  // namespace servelab
