// Prompts drawn on demand (Planner::make with PlanPrompts::on_demand) are the prompts a plan
// holds, id for id, and Rng::uniform_ints draws what uniform_int would.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "loadgen/plan.h"
#include "loadgen/rng.h"
#include "loadgen/sources.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace prompt_maker_test {  // named, not anonymous: a unity batch shares one translation unit

using testing_util::load_yaml;

TEST(RngUniformInts, DrawTheValuesUniformIntDraws) {
  // Ranges of 2 and 3 (rejection bounds close to 2^64), a vocabulary's, int32's widest, and lo == hi.
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, 1}, {5, 7}, {2, 31999}, {2, 151935}, {-2147483647 - 1, 2147483647}, {9, 9}};
  for (const auto& [lo, hi] : ranges) {
    Rng one(42), many(42);
    std::vector<int32_t> got(5000, -7);
    many.uniform_ints(lo, hi, got.data(), got.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], one.uniform_int(lo, hi)) << "[" << lo << ", " << hi << "] draw " << i;
    EXPECT_EQ(many.next_u64(), one.next_u64()) << "both streams end in the same state";
  }
}

Scenario varied_scenario(const std::string& extra) {
  return load_yaml(
      "seed: 11\n"
      "backend: {kind: sim}\n"
      "engine: {max_model_len: 400}\n"
      "strategies: [{batching: continuous}]\n"
      "workload:\n"
      "  rates: [4]\n"
      "  n_requests: 300\n"
      "  warmup_requests: 2\n"
      "  prompt_tokens: {dist: uniform, min: 1, max: 300}\n"
      "  output_tokens: {dist: uniform, min: 1, max: 120}\n"
      "  shared_prefix_tokens: 7\n"
      "  prefix_groups: [{tokens: 20, fraction: 0.5}, {tokens: 10, fraction: 0.3}]\n"
      "  copied_spans: {fraction: 0.4, span_tokens: 64, edit_rate: 0.1}\n" + extra);
}

void expect_prompts_on_demand_equal_held(const Scenario& s) {
  const Planner planner(s);
  const Plan held = planner.make(4.0), lazy = planner.make(4.0, PlanPrompts::on_demand);
  ASSERT_EQ(held.requests.size(), lazy.requests.size());
  ASSERT_FALSE(held.requests.empty());
  int copied = 0;
  for (size_t i = 0; i < held.requests.size(); ++i) {
    EXPECT_TRUE(lazy.requests[i].prompt.empty()) << "an on-demand plan holds no prompt (request " << i << ")";
    ASSERT_FALSE(held.requests[i].prompt.empty()) << i;
    EXPECT_EQ(lazy.prompt(i), held.requests[i].prompt) << "request " << i;
    EXPECT_EQ(held.prompt(i), held.requests[i].prompt) << "request " << i;
    EXPECT_EQ(to_request(lazy, i).prompt, to_request(held.requests[i], held.seed).prompt) << "request " << i;
    EXPECT_EQ(lazy.requests[i].intended_s, held.requests[i].intended_s) << i;
    EXPECT_EQ(lazy.requests[i].output_tokens, held.requests[i].output_tokens) << i;
    copied += held.requests[i].copied_span;
  }
  EXPECT_GT(copied, 0) << "the scenario should exercise copied spans";
}

TEST(PlanPromptsOnDemand, EqualTheHeldPromptsWithPrefixesGroupsAndCopiedSpans) {
  expect_prompts_on_demand_equal_held(varied_scenario(""));
}

TEST(PlanPromptsOnDemand, EqualTheHeldPromptsOfSessions) {
  // Later turns carry no prefix of their own (the conversation goes in front when sent).
  expect_prompts_on_demand_equal_held(varied_scenario("  sessions: {turns: 3, think_time_s: 1}\n"));
}

}  // namespace prompt_maker_test
}  // namespace servelab
