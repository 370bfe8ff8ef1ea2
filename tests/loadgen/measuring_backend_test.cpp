// measuring_backend: validate-sim's wrapper runs the real backend exactly as unwrapped (start-up
// sizing and decode buckets pass through) and records every step's shape during the run, priced
// by the cost model only after it (price_step_timings): nothing priced on the run's critical path.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/lora/lora_adapter.h"
#include "loadgen/measuring_backend.h"
#include "loadgen/step_error.h"
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

TEST(MeasuringBackend, StepsOnAdaptersArePricedWithTheirLoraTermsAsTheSimPricesThem) {
  // Half the requests on an adapter, through the engine on a sim backend wrapped for measuring:
  // each step keeps its adapted entries (rows, slot, parameters), and the price after the run is
  // the shape's plus those entries' LoRA terms, what the sim backend itself charged the step
  // (its virtual time) but for the adapter's one-off load.
  const ModelConfig c = micro_model();
  auto adapter = std::make_shared<LoraAdapter>(random_lora(
      c, "a", 8, 16.0f, {LoraTarget::q, LoraTarget::v, LoraTarget::down}, 3));
  adapter->id = 1;
  const SimCostModel cost = SimCostModel::roofline(SimDevice::preset("h200"));
  std::vector<StepTiming> timings;
  EngineConfig cfg = paged_config(continuous_sched(8, 256, true), 4 << 20, 4);
  cfg.lora.enabled = true;
  cfg.lora.max_loras = 1;
  Engine engine(cfg, measuring_backend(sim_backend(c, "h200"), timings));
  std::vector<Timed> items;
  for (uint64_t id = 0; id < 6; ++id) {
    Request r = make_request(id, 12, 8);
    if (id % 2 == 0) r.lora = adapter;
    items.push_back({0.0, r});
  }
  const RunResult r = run_virtual(engine, items);
  ASSERT_EQ(r.finished.size(), 6u);
  price_step_timings(timings, cost, c);
  const int64_t params = lora_params(c, adapter.get());
  int adapted_steps = 0;
  for (const StepTiming& t : timings) {
    int64_t rows = 0;
    for (const LoraRows& l : t.lora) {
      EXPECT_EQ(l.slot, 0);
      EXPECT_EQ(l.params, params);
      rows += l.rows;
    }
    EXPECT_LE(t.lora.size(), 3u);
    EXPECT_LE(rows, t.shape.n_tokens);
    adapted_steps += !t.lora.empty();
    EXPECT_NEAR(t.predicted_s, cost.step_seconds(c, t.shape) + lora_rows_seconds(cost.device, c, t.lora), 1e-15);
    if (!t.lora.empty()) EXPECT_GT(lora_rows_seconds(cost.device, c, t.lora), 0.0);
  }
  EXPECT_GE(adapted_steps, 8);  // every step of the three adapted requests' 8 outputs
  // The line steps_real.jsonl keeps carries them, as [rows, slot, params].
  const nlohmann::json line = nlohmann::json::parse(step_timing_line("x", timings.back()));
  if (!timings.back().lora.empty()) EXPECT_EQ(line.at("lora")[0][2].get<int64_t>(), params);
}

}  // namespace
}  // namespace servelab
