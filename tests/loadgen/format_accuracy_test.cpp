// measure_strategy_accuracy: before a run, each strategy's storage formats against the model's own
// on the run's backend. Strategies sharing formats share figures (quant_check's, exactly), the
// model's own formats get none, the sim gets a note, and report.accuracy_positions 0 turns it off.
#include "loadgen/format_accuracy.h"

#include <gtest/gtest.h>

#include "engine/backend/quant_check.h"
#include "engine/model/quantize_weights.h"
#include "loadgen/backend_spec.h"

namespace servelab {
namespace format_accuracy_loadgen_test {

constexpr const char* kYaml = R"(name: formats
seed: 4
model: {preset: tiny}
backend: {kind: cpu, threads: 2}
engine: {kv_cache_mb: 8, max_model_len: 256}
strategies:
  - {label: base, batching: continuous}
  - {label: fp8-a, batching: continuous, quantization: fp8}
  - {label: fp8-b, batching: static, batch_size: 4, quantization: fp8}
  - {label: kvfp8, batching: continuous, kv_cache_dtype: fp8}
workload:
  rates: [10]
  n_requests: 4
  prompt_tokens: {dist: uniform, min: 8, max: 16}
  output_tokens: {dist: uniform, min: 2, max: 4}
slo: {ttft_ms: 1000, tpot_ms: 100}
report: {accuracy_positions: 48}
)";

TEST(StrategyAccuracy, SharedFormatsShareQuantChecksFigures) {
  const Scenario sc = load_scenario_text(kYaml, "f.yaml");
  const BackendFactory backends(backend_spec(sc));
  std::vector<std::string> heard;
  const auto acc = measure_strategy_accuracy(sc, backends, [&](const std::string& f) { heard.push_back(f); });
  ASSERT_EQ(acc.size(), 3u);
  EXPECT_FALSE(acc.count("base"));
  EXPECT_EQ(heard.size(), 2u);  // fp8 once for both strategies, the FP8 KV cache once
  const analysis::FormatAccuracy& a = acc.at("fp8-a");
  ASSERT_TRUE(a.measured());
  EXPECT_EQ(a.positions, 48);
  EXPECT_EQ(a.kv_cache_dtype, "auto");
  EXPECT_NE(a.weights.find("fp8"), std::string::npos) << a.weights;
  EXPECT_EQ(a.reference, "the unquantized weights with fp32 K/V on cpu");
  EXPECT_EQ(acc.at("fp8-b").top1_agreement, a.top1_agreement);
  EXPECT_EQ(acc.at("fp8-b").mean_kl, a.mean_kl);
  EXPECT_EQ(acc.at("kvfp8").weights, "unquantized");
  EXPECT_EQ(acc.at("kvfp8").linear_bytes_per_weight, 2.0);

  // The same figures as quant_check over the factory's weights, seeded by the scenario.
  QuantCheckOptions o;
  o.n_positions = 48;
  o.n_sequences = 8;
  o.seed = 4;
  o.n_threads = 2;
  const QuantScheme fp8 = scheme_for_model(Quantization::fp8, backends.weights()->config);
  const auto want = quant_check(*backends.weights(), {{"fp8", fp8, KvCacheDType::auto_dtype},
                                                      {"kv", QuantScheme{}, KvCacheDType::fp8}}, o);
  EXPECT_EQ(a.top1_agreement, want[0].top1_agreement);
  EXPECT_EQ(a.mean_kl, want[0].mean_kl);
  EXPECT_EQ(a.max_logit_error, want[0].max_logit_error);
  EXPECT_EQ(acc.at("kvfp8").mean_kl, want[1].mean_kl);
  EXPECT_GT(a.mean_kl, 0.0);
}

TEST(StrategyAccuracy, OffWithZeroPositionsAndNotedOnTheSim) {
  const Scenario off = load_scenario_text(kYaml, "f.yaml", {"report.accuracy_positions=0"});
  EXPECT_TRUE(measure_strategy_accuracy(off, BackendFactory(backend_spec(off))).empty());

  const Scenario sim = load_scenario_text(kYaml, "f.yaml", {"backend={kind: sim}"});
  const auto acc = measure_strategy_accuracy(sim, BackendFactory(backend_spec(sim)));
  ASSERT_EQ(acc.size(), 3u);
  EXPECT_FALSE(acc.at("fp8-a").measured());
  EXPECT_NE(acc.at("fp8-a").note.find("sim has no weights"), std::string::npos) << acc.at("fp8-a").note;
  EXPECT_NEAR(acc.at("fp8-a").linear_bytes_per_weight, 1.0, 0.1);
}

}  // namespace format_accuracy_loadgen_test
}  // namespace servelab
