// What a run folder holds across commands: scenarios/quick.yaml (cited by the docs and --help)
// runs; `report DIR` never rewrites KV figures to null for lack of steps.jsonl; `run --force`
// takes the previous run's plots away; `compare --metric` takes the gates' names.
#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace {

TEST(QuickRunFolder, ReportNeedsStepsForceClearsPlotsCompareTakesGateNames) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string out = tmp.file("quick");
  fs::create_directories(out + "/plots");
  write_text(out + "/plots/stale.svg", "<svg/>");  // a previous run's plot
  write_text(out + "/records.jsonl", "");
  CliResult r = run_servelab({"run", "scenarios/quick.yaml", "--out", out, "--no-plots", "-q", "--force"}, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(fs::exists(out + "/plots/stale.svg")) << "run --force left the previous run's plots";

  r = run_servelab({"compare", out, out, "--metric", "ttft_p99_ms"}, tmp);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ttft_ms.p99"), std::string::npos) << r.output;

  const std::string summary = read_text(out + "/summary.json");
  fs::remove(out + "/steps.jsonl");
  r = run_servelab({"report", out, "--no-plots", "-q"}, tmp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("steps.jsonl: missing"), std::string::npos) << r.output;
  EXPECT_EQ(read_text(out + "/summary.json"), summary) << "summary.json was rewritten without its KV figures";
}

}  // namespace
}  // namespace servelab::cli_test
