// --set overrides: applied to the YAML tree before validation; bad paths are errors naming them.
#include <gtest/gtest.h>

#include "loadgen/overrides.h"
#include "loadgen/scenario.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace {

using testing_util::kBaseScenario;
using testing_util::load_yaml;
using testing_util::scenario_errors;

const char* kTwoStrategies =
    "strategies:\n"
    "  - batching: continuous\n"
    "  - batching: static\n"
    "    kv: {kind: naive}\n"
    "workload: {rates: [1], n_requests: 5}\n";

TEST(Overrides, ScalarsListsMapsAndIndices) {
  const Scenario s = load_yaml(kTwoStrategies, {"seed=9", "workload.rates=[2, 4, 8]", "strategies.0.kv.kind=naive",
                                                "strategies[1].kv.reserve=oracle", "slo.ttft_ms=250",
                                                "workload.output_tokens={dist: uniform, min: 4, max: 9}",
                                                "strategies.0.label=mine", "engine.kv_cache_mb=4"});
  EXPECT_EQ(s.seed, 9u);
  EXPECT_EQ(s.workload.rates, (std::vector<double>{2, 4, 8}));
  EXPECT_EQ(s.strategies[0].kv.kind, KvKind::naive);
  EXPECT_EQ(s.strategies[0].label, "mine");
  EXPECT_EQ(s.strategies[1].kv.reserve, NaiveReserve::oracle);
  EXPECT_DOUBLE_EQ(s.slo.ttft_ms, 250);
  EXPECT_EQ(s.workload.output.dist.kind, LengthDistKind::uniform);
  EXPECT_EQ(s.workload.output.dist.max, 9);
  EXPECT_EQ(s.engine.kv_cache_bytes, 4 << 20);  // naive max over 2048 tokens of 2 KiB
}

TEST(Overrides, NullRemovesAKeySoAnotherModeCanReplaceIt) {
  const Scenario s = load_yaml(kTwoStrategies, {"workload.rates=null", "workload.concurrency=3"});
  EXPECT_EQ(s.workload.mode, LoadMode::closed_loop);
  EXPECT_EQ(s.workload.concurrency, 3);
}

TEST(Overrides, BadValuesAreReportedAtTheOverride) {
  const auto errs = scenario_errors(kBaseScenario, {"workload.rates=[1, -3]", "strategies.0.max_num_seqs=lots"});
  ASSERT_EQ(errs.size(), 2u);
  EXPECT_EQ(errs[0], "--set workload.rates=[1, -3]: workload.rates[1] must be > 0 requests/s (got -3)");
  EXPECT_EQ(errs[1], "--set strategies.0.max_num_seqs=lots: strategies[0].max_num_seqs must be an integer (got 'lots')");
  // A misspelt key is created by the override, then rejected by the schema, at the override.
  const auto typo = scenario_errors(kBaseScenario, {"workload.arival.process=gamma"});
  ASSERT_EQ(typo.size(), 1u);
  EXPECT_EQ(typo[0].rfind("--set workload.arival.process=gamma: unknown key 'arival' in workload", 0), 0u) << typo[0];
  EXPECT_NE(typo[0].find("did you mean 'arrival'?"), std::string::npos);
}

TEST(Overrides, BadPathsAreErrorsNamingThem) {
  const auto errs = scenario_errors(kBaseScenario, {"strategies.2.kv.kind=naive", "name.x=1", "strategies.first.kv=1",
                                                    "noequals", "workload..rates=1", "slo.ttft_ms=[1"});
  ASSERT_EQ(errs.size(), 6u);
  EXPECT_EQ(errs[0], "--set strategies.2.kv.kind=naive: strategies has 1 entry (index 2 is out of range)");
  EXPECT_EQ(errs[1], "--set name.x=1: name is a plain value (base), so it has no key 'x'");
  EXPECT_EQ(errs[2], "--set strategies.first.kv=1: strategies is a list; 'first' is not an index");
  EXPECT_EQ(errs[3], "--set noequals: expected key.path=value (e.g. --set workload.rates=[1,2,4])");
  EXPECT_EQ(errs[4].rfind("--set workload..rates=1: bad key path 'workload..rates'", 0), 0u) << errs[4];
  EXPECT_EQ(errs[5].rfind("--set slo.ttft_ms=[1: value is not valid YAML", 0), 0u) << errs[5];
}

TEST(Overrides, ApplyOverridesOnAnEmptyTree) {
  YAML::Node root;
  std::vector<std::string> errors;
  const auto applied = apply_overrides(root, {"a.b[0]=1", "a.c=x"}, errors);
  // a.b does not exist, so it is created as a map and "0" is a key of it (the schema rejects it later).
  ASSERT_TRUE(errors.empty()) << errors[0];
  ASSERT_EQ(applied.size(), 2u);
  EXPECT_EQ(applied[1].path, "a.c");
  EXPECT_EQ(root["a"]["c"].as<std::string>(), "x");
}

}  // namespace
}  // namespace servelab
