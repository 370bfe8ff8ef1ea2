// The sim's KV capacity and preemption are the real engine's: the same scheduler and KV manager
// over an arena of the same slots. With every request there at time 0 (so step times decide
// nothing), an engine on the real cpu backend and one on the sim standing in for it (a device of
// fp32 K/V, as a cpu profile records) make the same steps: the same batches, the same arena use
// after each, and the same preemptions at the same steps.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/hardware.h"
#include "engine/model/weights.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace sim_kv_parity_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

std::unique_ptr<Backend> real_backend() {
  static const auto w = std::make_shared<const ModelWeights>(ModelWeights::random(micro_model(), 5));
  CpuBackendOptions options;
  options.n_threads = 1;
  return std::make_unique<CpuBackend>(w, options);
}

std::unique_ptr<Backend> sim_for_cpu() {
  SimCostModel cost = SimCostModel::roofline(SimDevice::preset("cpu-2core"));
  return std::make_unique<SimBackend>(micro_model(), cost);
}

TEST(SimKvParity, SimFillsAndPreemptsAtTheRealBackendsSteps) {
  // 14 requests whose decodes outgrow an arena of 14 blocks of 8: recompute preemptions.
  std::vector<Request> reqs;
  for (uint64_t id = 0; id < 14; ++id) reqs.push_back(make_request(id, 6 + int(id * 5 % 19), 10 + int(id * 7 % 23)));
  const int64_t slot = real_backend()->kv_bytes_per_slot();
  ASSERT_EQ(slot, 2 * 2 * 32 * 4);  // K and V × 2 layers × kv_dim 32 × fp32
  const EngineConfig config = paged_config(continuous_sched(8, 128, false), slot * 8 * 14 + slot / 2, 8);
  Engine real(config, real_backend()), sim(config, sim_for_cpu());
  const RunResult a = run_virtual(real, at_zero(reqs)), b = run_virtual(sim, at_zero(reqs));
  EXPECT_GT(a.n_preemptions(), 2);
  ASSERT_EQ(b.steps.size(), a.steps.size());
  int n_full = 0;  // steps after which the arena had no whole block free
  for (size_t i = 0; i < a.steps.size(); ++i) {
    const StepOutcome &r = a.steps[i], &s = b.steps[i];
    EXPECT_EQ(s.batch_size, r.batch_size) << "step " << i;
    EXPECT_EQ(s.n_tokens, r.n_tokens) << "step " << i;
    EXPECT_EQ(s.preempted, r.preempted) << "step " << i;
    EXPECT_EQ(s.n_running, r.n_running) << "step " << i;
    EXPECT_EQ(s.n_waiting, r.n_waiting) << "step " << i;
    EXPECT_EQ(s.kv.capacity, r.kv.capacity) << "step " << i;
    EXPECT_EQ(s.kv.used(), r.kv.used()) << "step " << i;
    EXPECT_EQ(s.kv.stored, r.kv.stored) << "step " << i;
    n_full += r.kv.capacity - r.kv.used() < 8 ? 1 : 0;
  }
  EXPECT_EQ(a.steps.front().kv.capacity, 8 * 14);  // the half slot of bytes left over holds nothing
  EXPECT_GT(n_full, 0);
  for (const auto& [id, f] : a.finished) {
    EXPECT_EQ(b.at(id).preemptions, f.preemptions) << "request " << id;
    EXPECT_EQ(b.at(id).n_output, f.n_output) << "request " << id;
  }
}

}  // namespace sim_kv_parity_test
}  // namespace servelab
