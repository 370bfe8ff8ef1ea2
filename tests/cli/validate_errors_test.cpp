// Invalid scenarios through the binary: exit code 2 and one `FILE:LINE:COL: message` per problem,
// from `validate` and `run` alike (run writes nothing), and bad --set overrides named as such.
// tests/loadgen covers the messages themselves in detail.
#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace {

constexpr const char* kBad = R"(name: bad
backend: {kind: sim}
strategies:
  - batching: continous
workload:
  rates: [1, -3]
  n_reqests: 5
)";

TEST(ValidateErrors, EveryProblemWithFileLineColumnAndExitTwo) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string path = tmp.file("bad.yaml");
  write_text(path, kBad);

  for (const char* cmd : {"validate", "run"}) {
    std::vector<std::string> args = {cmd, path};
    if (std::string(cmd) == "run") args.insert(args.end(), {"--out", tmp.file("out"), "--quiet"});
    const CliResult r = run_servelab(args, tmp);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find(path + ":4:15: strategies[0].batching must be one of static, dynamic, continuous"),
              std::string::npos)
        << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("did you mean 'continuous'?"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(path + ":6:14: workload.rates[1] must be > 0"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(path + ":7:3: unknown key 'n_reqests' in workload"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(tmp.file("out"))) << "an invalid scenario must not start a run";
}

TEST(ValidateErrors, BadOverrideIsNamedAndExitsTwo) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string path = tmp.file("ok.yaml");
  write_text(path,
             "backend: {kind: sim}\n"
             "strategies:\n"
             "  - {batching: continuous}\n"
             "workload: {rates: [1], n_requests: 2}\n");
  ASSERT_EQ(run_servelab({"validate", path}, tmp).code, 0);

  CliResult r = run_servelab({"validate", path, "--set", "strategies.3.kv.kind=naive"}, tmp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--set strategies.3.kv.kind=naive: strategies has 1 entry"), std::string::npos) << r.output;

  // An overridden value is checked like one in the file; its message names the override.
  r = run_servelab({"validate", path, "--set", "workload.n_requests=0"}, tmp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("workload.n_requests"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--set"), std::string::npos) << r.output;
}

TEST(ValidateErrors, MissingFileAndUnknownGateMetricExitTwo) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  EXPECT_EQ(run_servelab({"validate", tmp.file("absent.yaml")}, tmp).code, 2);

  const std::string path = tmp.file("gate.yaml");
  write_text(path,
             "backend: {kind: sim}\n"
             "strategies:\n"
             "  - {batching: continuous}\n"
             "workload: {rates: [1], n_requests: 2}\n"
             "gates:\n"
             "  - {metric: ttft_p99, max: 500}\n");
  const CliResult r = run_servelab({"validate", path}, tmp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(path + ":6:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did you mean 'ttft_p99_ms'?"), std::string::npos) << r.output;
}

// Issue 6 item 18: scenario gates accept every metric the analysis gates know (one registry);
// before, kv_peak_use, the breakdown shares, batch size and the TTFT parts were rejected here.
TEST(ValidateErrors, ScenarioGatesAcceptEveryAnalysisMetric) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string path = tmp.file("gates.yaml");
  write_text(path,
             "backend: {kind: sim}\n"
             "strategies:\n"
             "  - {batching: continuous}\n"
             "workload: {rates: [1], n_requests: 2}\n"
             "gates:\n"
             "  - {metric: kv_peak_use, max: 1}\n"
             "  - {metric: kv_breakdown_external_frag, max: 0.5}\n"
             "  - {metric: batch_size_mean, min: 1}\n"
             "  - {metric: queue_p99_ms, max: 1000}\n");
  const CliResult r = run_servelab({"validate", path}, tmp);
  EXPECT_EQ(r.code, 0) << r.output;
}

// Issue 6 item 12: n_requests is bounded (kMaxRequestsPerRun = 10 million) so n_requests +
// warmup_requests cannot overflow an int and a typo cannot plan billions of requests.
TEST(ValidateErrors, NRequestsHasANamedUpperBound) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string path = tmp.file("huge.yaml");
  write_text(path,
             "backend: {kind: sim}\n"
             "strategies:\n"
             "  - {batching: continuous}\n"
             "workload: {rates: [1], n_requests: 2147483647, warmup_requests: 1}\n");
  const CliResult r = run_servelab({"validate", path}, tmp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("workload.n_requests"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("10000000"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace servelab::cli_test
