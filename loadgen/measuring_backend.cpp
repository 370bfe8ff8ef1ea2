#include "loadgen/measuring_backend.h"

#include <chrono>

namespace servelab {
namespace {

class MeasuringBackend final : public Backend {
 public:
  MeasuringBackend(std::unique_ptr<Backend> inner, const SimCostModel& cost, std::vector<StepTiming>& out)
      : inner_(std::move(inner)), cost_(cost), out_(out) {}
  std::string name() const override { return inner_->name(); }
  const ModelConfig& config() const override { return inner_->config(); }
  int64_t kv_bytes_per_slot() const override { return inner_->kv_bytes_per_slot(); }
  void init_kv(int64_t n_slots) override { inner_->init_kv(n_slots); }
  void reserve_steps(const StepLimits& limits) override { inner_->reserve_steps(limits); }
  std::vector<int> decode_row_buckets() const override { return inner_->decode_row_buckets(); }
  ForwardResult forward(const Batch& batch, const KvManager& kv) override {
    const StepShape shape = StepShape::of(batch);
    const auto t0 = std::chrono::steady_clock::now();
    ForwardResult r = inner_->forward(batch, kv);
    const double measured = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out_.push_back({measured, cost_.step_seconds(inner_->config(), shape), shape});
    return r;
  }
  void copy_slots(std::span<const KvCopy> copies) override { inner_->copy_slots(copies); }
  std::unique_ptr<HostKvPool> make_host_pool(int64_t n_slots) override { return inner_->make_host_pool(n_slots); }
  void swap_out(std::span<const KvSwap> runs, HostKvPool& pool) override { inner_->swap_out(runs, pool); }
  void swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) override { inner_->swap_in(runs, pool); }

 private:
  std::unique_ptr<Backend> inner_;
  const SimCostModel& cost_;
  std::vector<StepTiming>& out_;
};

}  // namespace

std::unique_ptr<Backend> measuring_backend(std::unique_ptr<Backend> inner, const SimCostModel& cost,
                                           std::vector<StepTiming>& out) {
  return std::make_unique<MeasuringBackend>(std::move(inner), cost, out);
}

}  // namespace servelab
