#include "analysis/compare.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "tests/analysis/synthetic.h"

namespace servelab::analysis {
namespace {

Summary sweep_summary() {
  std::vector<RunInfo> infos;
  std::vector<RequestRecord> records;
  std::vector<StepRecord> steps;
  uint64_t seed = 10;
  for (double rate : {1.0, 4.0}) {
    infos.push_back(testing_data::run_info("continuous", "paged", rate, 30));
    testing_data::append_run({infos.back(), 0.05, 0.02}, 30, seed++, records, steps);
  }
  ScenarioInfo sc;
  sc.name = "cmp";
  return build_summary(sc, Environment{}, SloSpec{}, infos, records, steps);
}

TEST(Compare, IdenticalSummariesHaveNoRegression) {
  const Summary s = sweep_summary();
  const Comparison c = compare_summaries(s, s, 10.0);
  ASSERT_EQ(c.runs.size(), 2u);
  EXPECT_EQ(c.runs[0].deltas.size(), default_compare_metrics().size());
  EXPECT_FALSE(c.has_regression());
  EXPECT_EQ(c.exit_code(), 0);
  for (const auto& d : c.runs[0].deltas)
    if (!std::isnan(d.change_pct)) {
      EXPECT_DOUBLE_EQ(d.change_pct, 0.0) << d.metric;
    }
}

TEST(Compare, InjectedLatencyRegressionExitsOne) {
  const Summary base = sweep_summary();
  Summary cur = base;
  cur.runs[1].metrics.ttft_ms.p99 *= 1.25;
  const Comparison c = compare_summaries(base, cur, 10.0);
  EXPECT_TRUE(c.has_regression());
  EXPECT_EQ(c.exit_code(), 1);
  const auto& d = c.runs[1].deltas[1];
  EXPECT_EQ(d.metric, "ttft_ms.p99");
  EXPECT_NEAR(d.change_pct, 25.0, 1e-4);  // through summary.json's 6-decimal rounding
  EXPECT_TRUE(d.regression);
  EXPECT_EQ(compare_summaries(base, cur, 30.0).exit_code(), 0);  // within a looser threshold
  std::ostringstream out;
  print_comparison(out, c);
  EXPECT_NE(out.str().find("+25.0%"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("REGRESSION"), std::string::npos);
  EXPECT_NE(out.str().find("FAIL: 1 regression"), std::string::npos) << out.str();
}

TEST(Compare, ThroughputDownIsARegressionAndUpIsNot) {
  const Summary base = sweep_summary();
  Summary cur = base;
  cur.runs[0].metrics.output_throughput *= 0.85;
  EXPECT_EQ(compare_summaries(base, cur, 10.0).exit_code(), 1);
  cur = base;
  cur.runs[0].metrics.output_throughput *= 1.5;
  cur.runs[0].metrics.ttft_ms.p50 *= 0.5;  // faster is fine too
  EXPECT_EQ(compare_summaries(base, cur, 10.0).exit_code(), 0);
}

TEST(Compare, MatchesByLabelAndRateAndListsTheRest) {
  const Summary base = sweep_summary();
  Summary cur = base;
  cur.runs[1].info.rate = 8.0;  // same label, other rate: no match
  const Comparison c = compare_summaries(base, cur, 10.0);
  EXPECT_EQ(c.runs.size(), 1u);
  ASSERT_EQ(c.only_in_base.size(), 1u);
  ASSERT_EQ(c.only_in_new.size(), 1u);
  EXPECT_NE(c.only_in_new[0].find("@ 8"), std::string::npos);
  EXPECT_THROW(compare_summaries(base, cur, 10.0, {"p99"}), std::invalid_argument);
}

// Issue 6 item 10: NEW losing a run, or a metric going from a value to null, is a failure.
TEST(Compare, LostRunOrMetricBecomingNullFails) {
  const Summary base = sweep_summary();
  Summary lost = base;
  lost.runs.pop_back();
  EXPECT_EQ(compare_summaries(base, lost, 10.0).exit_code(), 1);
  Summary null_metric = base;
  null_metric.runs[0].metrics.goodput = std::nan("");
  const Comparison c = compare_summaries(base, null_metric, 10.0);
  EXPECT_EQ(c.exit_code(), 1);
  std::ostringstream out;
  print_comparison(out, c);
  EXPECT_NE(out.str().find("MISSING"), std::string::npos) << out.str();
  EXPECT_EQ(compare_summaries(base, lost, 10.0, default_compare_metrics(), /*allow_missing=*/true).exit_code(), 0);
  EXPECT_EQ(compare_summaries(base, null_metric, 10.0, default_compare_metrics(), true).exit_code(), 0);
}

/// The servelab binary end to end, when it has been built beside the tests.
TEST(Compare, CliExitCodes) {
  const std::string exe = std::string(SERVELAB_BINARY_DIR) + "/servelab";
  if (!std::filesystem::exists(exe)) GTEST_SKIP() << exe << " not built";
  const std::string dir = ::testing::TempDir() + "compare_cli/";
  std::filesystem::create_directories(dir);
  const Summary base = sweep_summary();
  Summary worse = base;
  worse.runs[0].metrics.tpot_ms.p50 *= 1.2;
  write_summary(dir + "base.json", base);
  write_summary(dir + "worse.json", worse);
  write_text_file(dir + "bad.json", "{not json");
  Summary lost = base;
  lost.runs.pop_back();
  write_summary(dir + "lost.json", lost);
  auto run = [&](const std::string& args) {
    const int status = std::system((exe + " compare " + args + " > " + dir + "out.txt 2>&1").c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(run(dir + "base.json " + dir + "base.json"), 0);
  EXPECT_EQ(run(dir + "base.json " + dir + "worse.json"), 1);
  EXPECT_EQ(run(dir + "base.json " + dir + "worse.json --threshold-pct 25"), 0);
  EXPECT_EQ(run(dir + "base.json " + dir + "worse.json --metric goodput"), 0);
  EXPECT_EQ(run(dir + "base.json " + dir + "bad.json"), 2);
  EXPECT_EQ(run(dir + "base.json " + dir + "lost.json"), 1);
  EXPECT_EQ(run(dir + "base.json " + dir + "lost.json --allow-missing"), 0);
  EXPECT_EQ(run(dir + "base.json " + dir + "missing.json"), 2);
}

}  // namespace
}  // namespace servelab::analysis
