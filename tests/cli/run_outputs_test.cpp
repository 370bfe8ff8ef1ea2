// `servelab run` end to end on a small scenario written here (sim backend: instant and exact):
// every result file is written, records.jsonl keeps DESIGN.md's per-request contract, gates pass
// and fail with the right exit code and junit.xml, `report` reproduces summary.json byte for
// byte, and `compare` of a run against itself finds no regression.
#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace run_outputs_test {  // named, not anonymous: a unity batch shares one translation unit

using nlohmann::json;

constexpr int kRequests = 8;
constexpr int kWarmup = 1;

// Two strategies × two rates; a gate that every run passes.
constexpr const char* kScenario = R"(name: e2e
seed: 3
model: {preset: tiny}
backend: {kind: sim, sim_device: cpu-2core}
engine: {kv_cache_mb: 4, max_model_len: 256}
strategies:
  - label: continuous-paged
    batching: continuous
    max_num_seqs: 8
    max_num_batched_tokens: 256
  - {batching: static, batch_size: 4, max_wait_ms: 20, kv: {kind: naive, reserve: max}}
workload:
  rates: [5, 20]
  n_requests: 8
  warmup_requests: 1
  prompt_tokens: {dist: uniform, min: 8, max: 64}
  output_tokens: {dist: uniform, min: 2, max: 24}
slo: {ttft_ms: 1000, tpot_ms: 100}
gates:
  - {metric: n_failed, max: 0}
  - {metric: ttft_p99_ms, max: 60000, strategy: continuous-paged}
)";

const std::vector<std::string> kRunLabels = {"continuous-paged@5", "static-naive@5", "continuous-paged@20",
                                             "static-naive@20"};

/// One run of kScenario shared by the tests of this suite (it is deterministic).
class RunFolder : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(servelab_exe())) return;
    tmp_ = std::make_unique<TempDir>();
    write_text(scenario(), kScenario);
    result_ = run_servelab({"run", scenario(), "--out", dir()}, *tmp_);
  }
  static void TearDownTestSuite() { tmp_.reset(); }

  static std::string scenario() { return tmp_->file("e2e.yaml"); }
  static std::string dir() { return tmp_->file("out"); }
  static std::string file(const std::string& name) { return dir() + "/" + name; }

  void SetUp() override {
    if (!tmp_) GTEST_SKIP() << servelab_exe() << " not built (build target servelab)";
    ASSERT_EQ(result_.code, 0) << result_.output;
  }

  static std::unique_ptr<TempDir> tmp_;
  static CliResult result_;
};

std::unique_ptr<TempDir> RunFolder::tmp_;
CliResult RunFolder::result_;

TEST_F(RunFolder, WritesEveryResultFile) {
  for (const char* f : {"summary.json", "records.jsonl", "steps.jsonl", "results.csv", "report.md", "junit.xml",
                        "report.html", "runs.json"}) {
    ASSERT_TRUE(fs::exists(file(f))) << f;
    EXPECT_GT(fs::file_size(file(f)), 0u) << f;
  }
  EXPECT_NE(result_.output.find("gates: 2 passed, 0 failed"), std::string::npos) << result_.output;

  // results.csv: a header and one row per run.
  const auto csv = read_lines(file("results.csv"));
  ASSERT_EQ(csv.size(), 1 + kRunLabels.size());
  EXPECT_EQ(csv[0].rfind("label,", 0), 0u) << csv[0];
  for (const auto& label : kRunLabels)
    EXPECT_TRUE(std::any_of(csv.begin() + 1, csv.end(), [&](const std::string& l) { return l.rfind(label + ",", 0) == 0; }))
        << label;

  // report.md and report.html name every run.
  const std::string md = read_text(file("report.md")), html = read_text(file("report.html"));
  for (const auto& label : {"continuous-paged", "static-naive"}) {
    EXPECT_NE(md.find(label), std::string::npos) << label;
    EXPECT_NE(html.find(label), std::string::npos) << label;
  }
  EXPECT_NE(html.find("<html"), std::string::npos);

  // steps.jsonl: every line is a JSON object naming its run.
  const auto steps = read_lines(file("steps.jsonl"));
  ASSERT_FALSE(steps.empty());
  std::set<std::string> step_runs;
  for (const auto& l : steps) step_runs.insert(json::parse(l).at("run").get<std::string>());
  EXPECT_EQ(step_runs, std::set<std::string>(kRunLabels.begin(), kRunLabels.end()));

  if (!on_path("gnuplot")) GTEST_SKIP() << "gnuplot not on PATH: plots not checked";
  int n_svg = 0, n_png = 0;
  for (const auto& e : fs::directory_iterator(file("plots"))) {
    if (e.path().extension() == ".svg" && fs::file_size(e.path()) > 0) ++n_svg;
    if (e.path().extension() == ".png" && fs::file_size(e.path()) > 0) ++n_png;
  }
  EXPECT_GE(n_svg, 3);  // at least TTFT, TPOT and throughput against rate
  EXPECT_EQ(n_png, n_svg);
  EXPECT_TRUE(fs::exists(file("plots/ttft_vs_rate.svg")));
}

TEST_F(RunFolder, SummaryFollowsTheResultsContract) {
  const json s = json::parse(read_text(file("summary.json")));
  EXPECT_EQ(s.at("schema"), "servelab.summary/1");
  EXPECT_TRUE(s.contains("scenario"));
  EXPECT_TRUE(s.at("environment").contains("device"));
  EXPECT_TRUE(s.at("environment").contains("commit"));
  ASSERT_EQ(s.at("runs").size(), kRunLabels.size());
  for (const json& run : s.at("runs")) {
    for (const char* k : {"label", "batching", "kv", "backend", "rate", "n_requests", "n_failed", "metrics"})
      EXPECT_TRUE(run.contains(k)) << k;
    EXPECT_EQ(run.at("n_requests"), kRequests);
    EXPECT_EQ(run.at("backend"), "sim");
    const json& m = run.at("metrics");
    for (const char* dist : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "lateness_ms"})
      for (const char* stat : {"mean", "p50", "p90", "p95", "p99", "p999", "max"})
        EXPECT_TRUE(m.at(dist).contains(stat)) << dist << "." << stat;
    for (const char* k : {"request_throughput_rps", "output_throughput_tok_s", "total_throughput_tok_s",
                          "goodput_tok_s", "request_goodput_rps", "slo_attainment"})
      EXPECT_TRUE(m.at(k).is_number()) << k;
    EXPECT_TRUE(m.at("kv_utilization").contains("mean"));
    EXPECT_TRUE(m.at("kv_utilization").contains("max"));
    EXPECT_LE(m.at("ttft_ms").at("p50").get<double>(), m.at("ttft_ms").at("p99").get<double>());
  }
  EXPECT_EQ(s.at("runs")[0].at("batching"), "continuous");
  EXPECT_EQ(s.at("runs")[0].at("kv"), "paged");
  EXPECT_EQ(s.at("runs")[1].at("batching"), "static");
  EXPECT_EQ(s.at("runs")[1].at("kv"), "naive");
}

TEST_F(RunFolder, RecordsHaveOneLinePerRequestWithTheDesignKeys) {
  const auto lines = read_lines(file("records.jsonl"));
  ASSERT_EQ(lines.size(), kRunLabels.size() * (kRequests + kWarmup));
  std::map<std::string, std::set<int>> ids;
  for (const auto& line : lines) {
    const json r = json::parse(line);
    for (const char* k : {"run", "id", "arrival_s", "sent_s", "first_token_s", "token_times_s", "end_s",
                          "prompt_tokens", "output_tokens", "status", "error", "preemptions"})
      ASSERT_TRUE(r.contains(k)) << k << " missing in " << line;
    EXPECT_EQ(r.at("status"), "ok") << line;
    EXPECT_TRUE(r.at("error").is_null()) << line;
    EXPECT_TRUE(ids[r.at("run").get<std::string>()].insert(r.at("id").get<int>()).second) << "duplicate " << line;

    // Times from the run's start: arrival ≤ sent ≤ first token ≤ … ≤ last token = end.
    const auto& times = r.at("token_times_s");
    ASSERT_EQ(times.size(), r.at("output_tokens").get<size_t>()) << line;
    ASSERT_FALSE(times.empty());
    EXPECT_LE(r.at("arrival_s").get<double>(), r.at("sent_s").get<double>());
    EXPECT_LE(r.at("sent_s").get<double>(), r.at("first_token_s").get<double>());
    EXPECT_DOUBLE_EQ(times.front().get<double>(), r.at("first_token_s").get<double>());
    EXPECT_DOUBLE_EQ(times.back().get<double>(), r.at("end_s").get<double>());
    EXPECT_TRUE(std::is_sorted(times.begin(), times.end(),
                               [](const json& a, const json& b) { return a.get<double>() < b.get<double>(); }));
    EXPECT_GE(r.at("prompt_tokens").get<int>(), 8);
    EXPECT_LE(r.at("prompt_tokens").get<int>(), 64);
  }
  ASSERT_EQ(ids.size(), kRunLabels.size());
  for (const auto& [run, set] : ids) EXPECT_EQ(set.size(), static_cast<size_t>(kRequests + kWarmup)) << run;
}

TEST_F(RunFolder, ReportReproducesSummaryByteForByte) {
  // Re-render in a copy (the other tests read the original), from the records alone.
  TempDir copy;
  const std::string again = copy.file("again");
  fs::copy(dir(), again, fs::copy_options::recursive);
  for (const char* f : {"summary.json", "results.csv", "report.md", "junit.xml", "report.html"})
    fs::remove(again + "/" + f);

  const CliResult r = run_servelab({"report", again, "--quiet", "--no-plots"}, copy);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_text(again + "/summary.json"), read_text(file("summary.json")));
  EXPECT_EQ(read_text(again + "/results.csv"), read_text(file("results.csv")));
  EXPECT_EQ(read_text(again + "/junit.xml"), read_text(file("junit.xml")));
}

// Issue 6 item 12: `report` rejects an impossible record with file:line and exit code 2.
TEST_F(RunFolder, ReportRejectsANegativeTokenCountWithFileLineAndExitTwo) {
  TempDir copy;
  const std::string again = copy.file("bad");
  fs::copy(dir(), again, fs::copy_options::recursive);
  std::string records = read_text(again + "/records.jsonl");
  const auto pos = records.find("\"output_tokens\":");
  ASSERT_NE(pos, std::string::npos);
  records.insert(pos + std::string("\"output_tokens\":").size(), "-");
  write_text(again + "/records.jsonl", records);
  const CliResult r = run_servelab({"report", again, "--quiet", "--no-plots"}, copy);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("records.jsonl:1: output_tokens must be >= 0"), std::string::npos) << r.output;
}

TEST_F(RunFolder, CompareAgainstItselfFindsNoRegression) {
  TempDir scratch;
  CliResult r = run_servelab({"compare", dir(), dir()}, scratch);
  EXPECT_EQ(r.code, 0) << r.output;
  for (const auto& label : {"continuous-paged", "static-naive"}) EXPECT_NE(r.output.find(label), std::string::npos);
  r = run_servelab({"compare", file("summary.json"), dir(), "--threshold-pct", "0"}, scratch);
  EXPECT_EQ(r.code, 0) << r.output;
  r = run_servelab({"compare", file("summary.json"), scratch.file("absent.json")}, scratch);
  EXPECT_EQ(r.code, 2) << r.output;
}

TEST_F(RunFolder, FailingGateExitsOneAndMarksJunitFailure) {
  TempDir scratch;
  const std::string out = scratch.file("gated");
  // No request's first token can come within a microsecond; the n_failed gate still passes.
  const CliResult r = run_servelab({"run", scenario(), "--out", out, "--quiet", "--no-plots", "--set",
                                    "gates=[{metric: n_failed, max: 0}, "
                                    "{metric: ttft_p99_ms, max: 0.001, strategy: continuous-paged, rate: 20}]"},
                                   scratch);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("FAIL"), std::string::npos) << r.output;
  const std::string junit = read_text(out + "/junit.xml");
  EXPECT_NE(junit.find("failures=\"1\""), std::string::npos) << junit;
  EXPECT_NE(junit.find("<failure"), std::string::npos) << junit;
  EXPECT_NE(junit.find("ttft_ms.p99"), std::string::npos) << junit;
  // The report folder is complete all the same, and `report` re-derives the failure.
  EXPECT_TRUE(fs::exists(out + "/summary.json"));
  EXPECT_EQ(run_servelab({"report", out, "--quiet", "--no-plots"}, scratch).code, 1);
}

TEST_F(RunFolder, ScenarioBaselineGatesRegressions) {
  TempDir scratch;
  // Against its own summary (default metrics, scenario spelling such as ttft_p99_ms): no regression.
  CliResult r = run_servelab({"run", scenario(), "--out", scratch.file("same"), "--quiet", "--no-plots", "--set",
                              "baseline=" + file("summary.json")},
                             scratch);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("baseline ttft_ms.p99"), std::string::npos) << r.output;

  // Against a baseline whose goodput was twice as high: every run regressed.
  json better = json::parse(read_text(file("summary.json")));
  for (json& run : better.at("runs"))
    run["metrics"]["goodput_tok_s"] = 2.0 * run["metrics"]["goodput_tok_s"].get<double>();
  write_text(scratch.file("better.json"), better.dump(2));
  r = run_servelab({"run", scenario(), "--out", scratch.file("worse"), "--quiet", "--no-plots", "--set",
                    "baseline={file: " + scratch.file("better.json") + ", metrics: [goodput, tpot_p99_ms]}"},  // old name still accepted
                   scratch);
  EXPECT_EQ(r.code, 1) << r.output;
  const std::string junit = read_text(scratch.file("worse") + "/junit.xml");
  EXPECT_NE(junit.find("<failure"), std::string::npos) << junit;
  EXPECT_NE(junit.find("goodput"), std::string::npos) << junit;
}

// Issue 6 item 10: a baseline run this run lost fails the baseline gate, unless the scenario
// says `allow_missing: true`.
TEST_F(RunFolder, BaselineRunMissingFromThisRunFailsUnlessAllowed) {
  TempDir scratch;
  json base = json::parse(read_text(file("summary.json")));
  json ghost = base.at("runs").at(0);
  ghost["label"] = "ghost@5";
  base["runs"].push_back(ghost);
  write_text(scratch.file("base.json"), base.dump(2));
  CliResult r = run_servelab({"run", scenario(), "--out", scratch.file("lost"), "--quiet", "--no-plots", "--set",
                              "baseline={file: " + scratch.file("base.json") + ", metrics: [goodput]}"},
                             scratch);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(read_text(scratch.file("lost") + "/junit.xml").find("ghost@5"), std::string::npos);
  r = run_servelab({"run", scenario(), "--out", scratch.file("allowed"), "--quiet", "--no-plots", "--set",
                    "baseline={file: " + scratch.file("base.json") + ", metrics: [goodput], allow_missing: true}"},
                   scratch);
  EXPECT_EQ(r.code, 0) << r.output;
}

}  // namespace run_outputs_test
}  // namespace servelab::cli_test
