// measuring_backend: validate-sim's wrapper runs the real backend exactly as unwrapped (start-up
// sizing and decode buckets pass through) and records every step's shape during the run, priced
// by the cost model only after it (price_step_timings): nothing priced on the run's critical path.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "loadgen/measuring_backend.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace {

using namespace enginetest;

TEST(MeasuringBackend, PassesStartUpSizingThroughAndPricesEveryStepAfterTheRun) {
  std::vector<StepLimits> seen;
  std::vector<StepTiming> timings;
  const SimCostModel cost = SimCostModel::roofline(SimDevice::preset("h100"));
  std::unique_ptr<Backend> wrapped =
      measuring_backend(std::make_unique<ReservingBackend>(seen, std::vector<int>{1, 2, 4, 8}), timings);
  EXPECT_EQ(wrapped->decode_row_buckets(), (std::vector<int>{1, 2, 4, 8}));
  EngineConfig config = paged_config(continuous_sched(8, 256, true), 64 << 20);
  config.kv.max_model_len = 128;
  Engine engine(config, std::move(wrapped));
  ASSERT_EQ(seen.size(), 1u);  // the engine sized the real backend through the wrapper
  EXPECT_EQ(seen[0].max_seqs, 8);
  std::vector<Timed> items;
  for (uint64_t id = 0; id < 5; ++id) items.push_back({0.001 * double(id), make_request(id, 20 + int(id), 6, id)});
  const RunResult r = run_virtual(engine, items);
  ASSERT_EQ(r.finished.size(), 5u);
  ASSERT_EQ(timings.size(), r.steps.size());
  for (size_t i = 0; i < timings.size(); ++i) {
    EXPECT_EQ(timings[i].predicted_s, 0.0);  // unpriced while running
    // The engine's own wall-time split of the step: the forward inside it is the wrapper's
    // measured execute(), the host work before it inside duration_s.
    EXPECT_GE(r.steps[i].forward_s, timings[i].measured_s);
    EXPECT_GT(r.steps[i].host_before_s, 0.0);
    EXPECT_GT(r.steps[i].host_after_s, 0.0);
    EXPECT_EQ(r.steps[i].device_s, 0.0);  // a host backend: nothing measured on a device
    // prompts of 20-24 tokens and 6 outputs: the longest context after the step's rows
    EXPECT_GE(r.steps[i].max_context, 20);
    EXPECT_LE(r.steps[i].max_context, 24 + 6);
  }
  EXPECT_EQ(r.steps.front().max_context, 20);  // the first step: request 0's prompt alone
  price_step_timings(timings, cost, micro_model());
  for (const StepTiming& t : timings) {
    EXPECT_GT(t.predicted_s, 0.0);
    EXPECT_GE(t.measured_s, 0.0);
    EXPECT_DOUBLE_EQ(t.predicted_s, cost.step_seconds(micro_model(), t.shape));
    EXPECT_GE(t.shape.n_tokens, 1);
  }
}

}  // namespace
}  // namespace servelab
