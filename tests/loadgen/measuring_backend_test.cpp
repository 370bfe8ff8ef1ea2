// measuring_backend: validate-sim's wrapper runs the real backend exactly as unwrapped (start-up
// sizing and decode buckets pass through) and records every step's shape during the run, priced
// by the cost model only after it (price_step_timings): nothing priced on the run's critical path.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/backend/sim_sustained.h"
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
  for (size_t i = 1; i < timings.size(); ++i)  // each step's start, after the one before it
    EXPECT_GE(timings[i].start_s, timings[i - 1].start_s + timings[i - 1].measured_s);
  price_step_timings(timings, cost, micro_model());
  for (const StepTiming& t : timings) {
    EXPECT_GT(t.predicted_s, 0.0);
    EXPECT_GE(t.measured_s, 0.0);
    EXPECT_DOUBLE_EQ(t.predicted_s, cost.step_seconds(micro_model(), t.shape));
    EXPECT_GE(t.shape.n_tokens, 1);
  }
}

TEST(MeasuringBackend, WithASustainedLoadProbeEachStepIsPricedAtTheLoadOfTheRealStepsBeforeIt) {
  const ModelConfig m = preset("llama2-7b");
  const SimCostModel plain = SimCostModel::roofline(SimDevice::preset("h200"));
  SimCostModel loaded = plain;
  StepShape heavy;  // a 2,048-token prefill: compute-bound
  heavy.n_tokens = heavy.sum_context = heavy.max_context = 2048;
  heavy.n_sampled = heavy.n_seqs = 1;
  heavy.prefill_pairs = heavy.attention_pairs = 2048.0 * 2049.0 / 2.0;
  StepShape decode;
  decode.n_tokens = decode.n_sampled = decode.n_seqs = 8;
  decode.sum_context = 8 * 512;
  decode.max_context = 512;
  decode.decode_context = decode.attention_pairs = 8.0 * 512;
  SustainedLoad probe;
  probe.heavy = {heavy, 0.100, 0.095, 0.115};
  probe.decode = {decode, 0.010, 0.0098, 0.0104};
  probe.tau_s = 0.1;
  loaded.sustained = std::make_shared<const SustainedLoad>(probe);
  const double base = plain.step_seconds(m, heavy);
  std::vector<StepTiming> steps;  // 5 s of them back to back (each ran 0.1 s), then one after 100 s idle
  for (int i = 0; i < 50; ++i) steps.push_back({0.1, 0.0, 0.1 * i, heavy, {}});
  steps.push_back({0.1, 0.0, 105.0, heavy, {}});
  std::vector<StepTiming> unpriced = steps;
  price_step_timings(steps, loaded, m);
  EXPECT_DOUBLE_EQ(steps.front().predicted_s, base);               // after idle: the grid's price
  EXPECT_NEAR(steps[49].predicted_s, 1.15 * base, 1e-3 * base);     // held: hot
  EXPECT_NEAR(steps.back().predicted_s, base, 1e-3 * base);         // cooled again
  price_step_timings(unpriced, plain, m);
  for (const StepTiming& t : unpriced) EXPECT_DOUBLE_EQ(t.predicted_s, base);  // no probe: the grid's price
  // Unknown starts (steps_real.jsonl before start_s was written): back to back.
  for (StepTiming& t : unpriced) t.start_s = -1.0;
  price_step_timings(unpriced, loaded, m);
  EXPECT_NEAR(unpriced[49].predicted_s, 1.15 * base, 1e-3 * base);
  EXPECT_NEAR(unpriced.back().predicted_s, 1.15 * base, 1e-3 * base);
  // The start is written to steps_real.jsonl and read back by price-steps.
  EXPECT_NE(step_timing_line("r", steps[3]).find("\"start_s\":0.3"), std::string::npos);
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
