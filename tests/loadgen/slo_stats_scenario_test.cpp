// The scenario side of issue 12 items 3–6: slo.itl_ms/e2e_ms/percentiles, workload.repeat with
// derived seeds, report.percentiles/window/cdf_rate, and their errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "loadgen/plan.h"
#include "loadgen/sweep.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace {

using testing_util::load_yaml;
using testing_util::scenario_errors;
using testing_util::write_temp;

constexpr const char* kBase =
    "seed: 5\n"
    "backend: {kind: sim}\n"
    "engine: {max_model_len: 256}\n"
    "strategies: [{batching: continuous}]\n";

TEST(SloStatsScenario, ParsesEveryNewKey) {
  const Scenario s = load_yaml(std::string(kBase) +
                               "workload: {rates: [2, 4], n_requests: 10, repeat: 3}\n"
                               "slo:\n"
                               "  ttft_ms: .inf\n"
                               "  e2e_ms: 5000\n"
                               "  itl_ms: 200\n"
                               "  percentiles: [{metric: ttft, percentile: 99, max_ms: 2000}]\n"
                               "report:\n"
                               "  percentiles: [50, 75, 99.9]\n"
                               "  window: {skip_first_requests: 2, skip_last_requests: 1}\n"
                               "  cdf_rate: 4\n"
                               "gates: [{metric: ttft_p99_9_ms, max: 5000}, {metric: goodput, min: 1}]\n");
  EXPECT_EQ(s.workload.repeat, 3);
  EXPECT_EQ(s.gates.size(), 2u);  // a configured percentile and an old unit-less name are gate metrics
  EXPECT_NE(describe(s).find("each point 3 times"), std::string::npos) << describe(s);
  EXPECT_TRUE(std::isinf(s.slo.ttft_ms));
  EXPECT_EQ(s.slo.e2e_ms, 5000);
  EXPECT_EQ(s.slo.itl_ms, 200);
  ASSERT_EQ(s.slo.percentiles.size(), 1u);
  EXPECT_EQ(s.slo.percentiles[0].metric, "ttft");
  EXPECT_EQ(s.slo.percentiles[0].max_ms, 2000);
  EXPECT_EQ(s.report.percentiles, (std::vector<double>{50, 75, 99.9}));
  EXPECT_EQ(s.report.skip_first_requests, 2);
  EXPECT_EQ(s.report.cdf_rate, 4);
  // Defaults: no ITL/E2E bound, one repetition, no window.
  const Scenario d = load_yaml(std::string(kBase) + "workload: {rates: [1], n_requests: 4}\n");
  EXPECT_TRUE(std::isinf(d.slo.itl_ms) && std::isinf(d.slo.e2e_ms));
  EXPECT_EQ(d.workload.repeat, 1);
  EXPECT_TRUE(std::isnan(d.report.cdf_rate));
}

TEST(SloStatsScenario, ErrorsNameTheKey) {
  const auto errs = scenario_errors(std::string(kBase) +
                                    "workload: {rates: [1, 2], n_requests: 10, repeat: 0}\n"
                                    "slo:\n"
                                    "  itl_ms: -1\n"
                                    "  percentiles: [{metric: ttfb, percentile: 120, max_ms: 10}, {metric: e2e}]\n"
                                    "report:\n"
                                    "  percentiles: [101]\n"
                                    "  window: {skip_first_s: 1, skip_last_requests: 2}\n"
                                    "  cdf_rate: 3\n");
  std::string all;
  for (const auto& e : errs) all += e + "\n";
  for (const char* want : {"slo.itl_ms must be > 0 ms", "slo.percentiles[0].metric must be ttft, tpot, itl or e2e",
                           "slo.percentiles[0].percentile must be in (0, 100]", "slo.percentiles[1] needs percentile:",
                           "report.percentiles[0] must be in [0, 100]", "report.window: give seconds",
                           "report.cdf_rate must be one of the sweep's rates: 1, 2", "workload.repeat must be in [1, 100]"})
    EXPECT_NE(all.find(want), std::string::npos) << want << "\n" << all;
  EXPECT_EQ(all.rfind("scn.yaml:", 0), 0u) << all;  // every message carries its location
}

TEST(SloStatsScenario, RepeatSeedsAreDerivedAndTheFirstIsTheScenarios) {
  EXPECT_EQ(repeat_seed(42, 1), 42u);
  std::set<uint64_t> seeds;
  for (int k = 1; k <= 20; ++k) seeds.insert(repeat_seed(42, k));
  EXPECT_EQ(seeds.size(), 20u);
  EXPECT_NE(repeat_seed(42, 2), repeat_seed(43, 2));
}

TEST(SloStatsScenario, SweepRunsEachPointRepeatTimesWithItsOwnPlan) {
  const Scenario s = load_yaml("seed: 5\nbackend: {kind: sim}\nengine: {max_model_len: 256}\n"
                               "strategies: [{batching: continuous}, {batching: static, batch_size: 2, kv: {kind: naive}}]\n"
                               "workload: {rates: [4], n_requests: 5, repeat: 2, output_tokens: 3, prompt_tokens: 8}\n",
                               {});
  const Planner planner(s);
  const auto points = plan_sweep(planner);
  ASSERT_EQ(points.size(), 4u);  // 1 rate × 2 repetitions × 2 strategies
  EXPECT_EQ(points[0].label, "continuous-paged@4#1");
  EXPECT_EQ(points[1].label, "static-naive@4#1");
  EXPECT_EQ(points[2].label, "continuous-paged@4#2");
  EXPECT_EQ(points[2].point, "continuous-paged@4");
  EXPECT_EQ(points[2].seed, repeat_seed(5, 2));
  // Repetition 2's plan is drawn from its own seed: other arrival times.
  Scenario other = s;
  other.seed = repeat_seed(s.seed, 2);
  const Plan p1 = planner.make(4), p2 = Planner(other).make(4);
  ASSERT_EQ(p1.requests.size(), p2.requests.size());
  EXPECT_NE(p1.requests[1].intended_s, p2.requests[1].intended_s);

  SweepOptions opts;
  opts.out_dir = std::filesystem::path(write_temp("repeat_out_marker", "")).parent_path() / "repeat_out";
  const SweepOutcome out = run_sweep(planner, opts);
  ASSERT_EQ(out.records.size(), 20u);
  std::set<std::string> labels;
  for (const auto& r : out.records) labels.insert(r.run);
  EXPECT_EQ(labels, (std::set<std::string>{"continuous-paged@4#1", "continuous-paged@4#2", "static-naive@4#1",
                                           "static-naive@4#2"}));
}

}  // namespace
}  // namespace servelab
