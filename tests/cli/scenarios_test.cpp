// Every committed scenario (scenarios/*.yaml, globbed, so a new file is covered without editing
// this test) validates as written and runs end to end once shrunk with --set: 6 requests, no
// warm-up, one rate (the highest, so a CPU run spends little wall time waiting for arrivals),
// gates and baseline removed (a 6-request run is not what they were set for; the full-size
// validation above still checks them against the strategies and rates). A repeated scenario
// (workload.repeat) runs 2 repetitions per point, and a steady-state window is dropped (it would
// leave nothing of 6 requests).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loadgen/scenario.h"
#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace {

constexpr int kShrunkRequests = 6;

std::vector<std::string> committed_scenarios() {
  std::vector<std::string> files;
  const fs::path dir = fs::path(SERVELAB_SOURCE_DIR) / "scenarios";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".yaml") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string yaml_number(double v) {
  if (std::isinf(v)) return ".inf";
  std::ostringstream s;
  s << std::setprecision(std::numeric_limits<double>::max_digits10) << v;
  return s.str();
}

class CommittedScenario : public ::testing::TestWithParam<std::string> {};

TEST(CommittedScenarios, FolderHoldsTheExamples) {
  const auto files = committed_scenarios();
  for (const char* name : {"quickstart.yaml", "ci.yaml", "chat-slo.yaml", "bursty.yaml", "long-context.yaml",
                           "capacity.yaml", "closed-loop.yaml"})
    EXPECT_TRUE(std::any_of(files.begin(), files.end(),
                            [&](const std::string& f) { return fs::path(f).filename() == name; }))
        << name << " missing from scenarios/";
}

TEST_P(CommittedScenario, ValidatesAndRunsShrunk) {
  SERVELAB_REQUIRE_BINARY();
  const std::string path = GetParam();
  TempDir tmp;

  const Scenario full = load_scenario(path);
  // validate builds what the run would (model, profile, device, arenas): a GPU scenario on a
  // machine without one is checked as a file only.
  std::vector<std::string> vargs = {"validate", path};
  if (full.backend.kind == BackendKind::cuda && cuda_devices() == 0) vargs.push_back("--schema-only");
  CliResult r = run_servelab(vargs, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(": ok ("), std::string::npos) << r.output;

  std::vector<std::string> overrides = {"workload.duration_s=null",
                                        "workload.n_requests=" + std::to_string(kShrunkRequests),
                                        "workload.warmup_requests=0", "gates=null", "baseline=null"};
  if (full.workload.mode == LoadMode::open_loop) {
    ASSERT_FALSE(full.workload.rates.empty());
    const double top = *std::max_element(full.workload.rates.begin(), full.workload.rates.end());
    overrides.push_back("workload.rates=[" + yaml_number(top) + "]");
  }
  const int repeats = full.workload.repeat > 1 ? 2 : 1;
  if (repeats > 1) overrides.push_back("workload.repeat=2");
  if (full.report.skip_first_s > 0 || full.report.skip_last_s > 0 || full.report.skip_first_requests > 0 ||
      full.report.skip_last_requests > 0)
    overrides.push_back("report.window=null");
  if (!std::isnan(full.report.cdf_rate)) overrides.push_back("report.cdf_rate=null");

  // A GPU scenario on a machine without a GPU (CI): validated as written above, run on the sim
  // backend (same model, engine and workload), since `backend: cuda` would stop with exit 2 here.
  // engine.gpu_memory_utilization is cuda-only: the sim run gets a fixed 16 GiB arena instead.
  // A draft model has nothing to run on sim: such a scenario runs its strategies on the cpu
  // backend with the tiny preset instead (the same strategies, drafts and workload).
  const bool drafts_a_model = std::any_of(full.strategies.begin(), full.strategies.end(), [](const StrategySpec& st) {
    return st.speculative && st.speculative->method != SpecMethod::ngram;
  });
  if (full.backend.kind == BackendKind::cuda && cuda_devices() == 0 && drafts_a_model) {
    overrides.push_back("backend={kind: cpu, threads: 1}");
    overrides.push_back("model.preset=tiny");
    overrides.push_back("model.dtype=null");
    overrides.push_back("engine.kv_cache_mb=64");
    overrides.push_back("workload.output_tokens=24");  // the tiny model on the CPU (and ASan in CI): short replies
  } else if (full.backend.kind == BackendKind::cuda && cuda_devices() == 0) {
    overrides.push_back("backend={kind: sim}");
    if (full.engine.gpu_memory_utilization > 0) {
      overrides.push_back("engine.gpu_memory_utilization=null");
      overrides.push_back("engine.kv_cache_mb=16384");
    }
  }

  // The CPU engine runs in real time, under ASan in CI: 24-token replies keep every strategy's
  // path (batching, KV, reports) at a fraction of the scenario's lengths.
  if (full.backend.kind == BackendKind::cpu) overrides.push_back("workload.output_tokens=24");
  // Copied-span prompts on the CPU: a 96-token document in 160-token prompts keeps the layout
  // (document, request, the document's restart) at a third of the prefill (34 s under ASan before).
  if (full.backend.kind == BackendKind::cpu && full.workload.copied_spans.enabled()) {
    overrides.push_back("workload.prompt_tokens=160");
    overrides.push_back("workload.copied_spans.span_tokens=96");
  }

  const std::string out = tmp.file("run");
  std::vector<std::string> args = {"run", path, "--out", out, "--quiet", "--no-plots"};
  for (const auto& o : overrides) {
    args.push_back("--set");
    args.push_back(o);
  }
  r = run_servelab(args, tmp);
  ASSERT_EQ(r.code, 0) << r.output;

  // One run per strategy, each with every shrunk request finished and in the summary.
  const auto summary = nlohmann::json::parse(read_text(out + "/summary.json"));
  ASSERT_EQ(summary["runs"].size(), full.strategies.size()) << summary.dump(1);
  for (const auto& run : summary["runs"]) {
    EXPECT_EQ(run["n_requests"].get<int>(), kShrunkRequests * repeats) << run["label"];
    EXPECT_EQ(run["n_failed"].get<int>(), 0) << run["label"];
    EXPECT_GT(run["metrics"]["output_throughput_tok_s"].get<double>(), 0.0) << run["label"];
    if (repeats > 1) { EXPECT_EQ(run["repeats"]["runs"].size(), 2u) << run["label"]; }
  }
  EXPECT_EQ(read_lines(out + "/records.jsonl").size(), full.strategies.size() * kShrunkRequests * repeats);
  EXPECT_TRUE(fs::exists(out + "/report.md"));
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = fs::path(info.param).stem().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, CommittedScenario, ::testing::ValuesIn(committed_scenarios()), test_name);

}  // namespace
}  // namespace servelab::cli_test
