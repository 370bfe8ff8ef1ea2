// Scenario validation runs the engine's arena check (check_kv_arena), so a KV cache too small for
// the model fails at `servelab validate`, not after earlier runs of the sweep finished.
#include <gtest/gtest.h>

#include "loadgen_test_util.h"
#include "loadgen/scenario.h"

namespace servelab {
namespace {

using testing_util::scenario_errors;

std::string scenario_with(const std::string& backend, const std::string& engine, const std::string& kv) {
  return "name: arena\n"
         "backend: {kind: " + backend + "}\n"
         "engine: {" + engine + "}\n"
         "strategies:\n"
         "  - {batching: continuous, kv: {" + kv + "}}\n"
         "workload:\n"
         "  rates: [1]\n"
         "  n_requests: 2\n"
         "  prompt_tokens: 16\n"
         "  output_tokens: 8\n";
}

TEST(ScenarioKvArena, TooSmallForOneBlockFailsAtValidate) {
  for (const char* backend : {"cpu", "sim"}) {
    const auto errs = scenario_errors(scenario_with(backend, "kv_cache_bytes: 1000", "kind: paged, block_size: 16"));
    ASSERT_EQ(errs.size(), 1u) << backend;
    EXPECT_NE(errs[0].find("engine.kv_cache_bytes"), std::string::npos) << errs[0];
    EXPECT_NE(errs[0].find("too small for one block"), std::string::npos) << errs[0];
  }
}

TEST(ScenarioKvArena, NaiveMaxNeedsOneMaxLengthReservation) {
  const std::string kv = "kind: naive, reserve: max";
  const auto errs = scenario_errors(scenario_with("sim", "kv_cache_mb: 1, max_model_len: 2048", kv));
  bool found = false;
  for (const auto& e : errs) found |= e.find("max_model_len") != std::string::npos && e.find("kv_cache_bytes") != std::string::npos;
  EXPECT_TRUE(found) << (errs.empty() ? "no error" : errs[0]);
  EXPECT_TRUE(scenario_errors(scenario_with("sim", "kv_cache_mb: 64, max_model_len: 64", kv)).empty());
}

}  // namespace
}  // namespace servelab
