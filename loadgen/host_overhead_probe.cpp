#include "loadgen/host_overhead_probe.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/backend/forwarding_backend.h"
#include "engine/backend/make_backend.h"
#include "engine/clock.h"
#include "engine/engine.h"
#include "loadgen/inprocess_driver.h"

namespace servelab {
namespace {

constexpr int kPrompt = 32, kOutput = 64, kWaves = 4;

/// Every request due at time 0, in id order.
class BurstSource final : public RequestSource {
 public:
  BurstSource(int n, int vocab) {
    for (int i = 0; i < n; ++i) {
      Request r;
      r.id = static_cast<uint64_t>(i);
      for (int t = 0; t < kPrompt; ++t) r.prompt.push_back(2 + (i * 131 + t * 7) % std::max(1, vocab - 2));
      r.sampling.max_tokens = kOutput;
      r.sampling.seed = static_cast<uint64_t>(i);
      requests_.push_back(std::move(r));
    }
  }
  std::optional<double> next_time() const override {
    return next_ < requests_.size() ? std::optional<double>(0.0) : std::nullopt;
  }
  Request take() override { return std::move(requests_.at(next_++)); }
  bool exhausted() const override { return next_ >= requests_.size(); }

 private:
  std::vector<Request> requests_;
  size_t next_ = 0;
};

/// The sim backend, with the wall time spent inside execute() summed: the probe counts only
/// what lies outside it (a real backend's own host work is inside its measured execute()). It
/// asks for full steps (caps().reads_rows), as a real backend does: the engine then builds every
/// row's position, slot and block table, as it does before each real forward (the sim's own
/// shape-only steps skip that work, and a probe over them priced the real runs' host time ~4x low).
class ForwardTimer final : public ForwardingBackend {
 public:
  explicit ForwardTimer(std::unique_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}
  BackendCaps caps() const override {
    BackendCaps c = ForwardingBackend::caps();
    c.reads_rows = true;
    return c;
  }
  StepOutput execute(const Step& step) override {
    const auto t0 = std::chrono::steady_clock::now();
    StepOutput r = inner().execute(step);
    forward_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  double forward_s = 0.0;
};

HostOverheadPoint run_once(const ModelConfig& model, int cap) {
  EngineConfig config;
  config.sched.kind = BatchingKind::continuous;
  config.sched.max_num_seqs = cap;
  config.sched.max_num_batched_tokens = std::max(2048, cap * kPrompt);
  config.kv.kind = KvKind::paged;
  config.kv.block_size = 16;
  config.kv.prefix_caching = false;
  config.kv.max_model_len = kPrompt + kOutput;
  BackendSpec spec;  // the sim on the H100's roofline: cheap forwards, the engine's work is what counts
  spec.kind = BackendKind::sim;
  spec.sim_model_config = model;
  spec.sim_device = SimDevice::preset("h100");
  auto backend = std::make_unique<ForwardTimer>(make_backend(spec));
  config.kv_cache_bytes = backend->kv_bytes_per_slot() * int64_t(cap) * (kPrompt + kOutput + 32);
  const ForwardTimer& timer = *backend;
  Engine engine(config, std::move(backend));
  BurstSource source(kWaves * cap, model.vocab_size);
  VirtualClock clock;
  // The sinks a measured run has: records kept with their token times, steps counted.
  std::vector<RequestRecord> records;
  int64_t steps = 0, seqs = 0;
  RecordSinks sinks;
  sinks.on_record = [&](const RequestRecord& r) { records.push_back(r); };
  sinks.on_step = [&](const StepRecord& s) {
    ++steps;
    seqs += s.batch_size;
  };
  const auto t0 = std::chrono::steady_clock::now();
  drive_in_process(engine, source, clock, "host-overhead", sinks);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (steps == 0 || records.size() != static_cast<size_t>(kWaves * cap))
    throw std::logic_error("host overhead probe: the burst of " + std::to_string(kWaves * cap) + " requests did not finish");
  const double outside = std::max(0.0, wall - timer.forward_s);
  return {cap, static_cast<double>(seqs) / static_cast<double>(steps), outside / static_cast<double>(steps),
          static_cast<int>(steps)};
}

}  // namespace

HostOverheadProbe measure_host_overhead(const ModelConfig& model, const std::vector<int>& batch_sizes, int repeats) {
  if (batch_sizes.empty() || repeats < 1)
    throw std::invalid_argument("host overhead probe: needs batch sizes and repeats >= 1");
  HostOverheadProbe out;
  std::vector<std::pair<double, double>> xy;
  for (int cap : batch_sizes) {
    if (cap < 1) throw std::invalid_argument("host overhead probe: batch size " + std::to_string(cap) + " < 1");
    HostOverheadPoint best = run_once(model, cap);
    for (int r = 1; r < repeats; ++r) {
      HostOverheadPoint p = run_once(model, cap);
      if (p.step_s < best.step_s) best = p;
    }
    out.points.push_back(best);
    xy.push_back({best.mean_seqs, best.step_s});
  }
  out.fitted = HostOverhead::fit(xy);
  return out;
}

}  // namespace servelab
