// End to end through the binary: a repeated scenario writes intervals and `servelab compare`
// uses them; `servelab report` re-renders the same summary (window and percentiles from runs.json).
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace {

std::vector<std::string> shrunk(const std::string& out, const std::string& seed) {
  return {"run", std::string(SERVELAB_SOURCE_DIR) + "/scenarios/slo-stats.yaml", "--out", out, "--quiet", "--no-plots",
          "--set", "workload.n_requests=20", "--set", "workload.rates=[16]", "--set", "workload.repeat=3",
          "--set", "report.window={skip_first_requests: 2, skip_last_requests: 2}", "--set", "report.cdf_rate=null",
          "--set", "gates=null", "--set", "seed=" + seed};
}

TEST(SloStatsCli, RepeatedRunsCarryIntervalsAndCompareUsesThem) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  CliResult r = run_servelab(shrunk(tmp.file("a"), "1"), tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_servelab(shrunk(tmp.file("b"), "2"), tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto s = nlohmann::json::parse(read_text(tmp.file("a") + "/summary.json"));
  const auto& run = s["runs"][0];
  EXPECT_EQ(run["n_requests"], 3 * 16);  // 20 per repetition, 2 + 2 dropped by the window
  EXPECT_EQ(run["metrics"]["n_window_dropped"], 12);
  EXPECT_EQ(run["repeats"]["labels"][1], "continuous-paged@16#2");
  EXPECT_TRUE(run["repeats"]["stats"]["ttft_ms.p99"]["ci95"][0].is_number());
  EXPECT_TRUE(run["metrics"]["ttft_ms"].contains("p99_99"));
  EXPECT_TRUE(run["metrics"]["slo_percentiles"][0]["met"].is_boolean());
  EXPECT_NE(s["report"]["window"]["description"].get<std::string>().find("first 2"), std::string::npos);

  r = run_servelab({"compare", tmp.file("a"), tmp.file("b"), "--threshold-pct", "0"}, tmp);
  EXPECT_NE(r.output.find("95% confidence intervals must not overlap"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("base [95% CI]"), std::string::npos) << r.output;

  // Re-rendering from the records gives the same bytes: window and percentiles come from runs.json.
  const std::string before = read_text(tmp.file("a") + "/summary.json");
  r = run_servelab({"report", tmp.file("a"), "--quiet", "--no-plots"}, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_text(tmp.file("a") + "/summary.json"), before);
}

}  // namespace
}  // namespace servelab::cli_test
