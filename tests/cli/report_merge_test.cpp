// `servelab report DIR --add FILE... --out NEW` (cli/report_merge.h): a peer's records of the same
// plan joined to a run folder's, one report over all of them; NEW re-renders by itself byte for
// byte; DIR is left as it was; bad inputs exit 2 with the file named.
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace {

constexpr const char* kScenario = R"(name: offline-mini
seed: 3
model: {preset: tiny}
backend: {kind: cpu, threads: 1}
engine: {kv_cache_mb: 8, max_model_len: 256}
strategies:
  - label: continuous-paged
    batching: continuous
    max_num_seqs: 16
    max_num_batched_tokens: 512
workload:
  rates: [.inf]
  n_requests: 6
  prompt_tokens: {dist: uniform, min: 4, max: 16}
  output_tokens: {dist: uniform, min: 2, max: 6}
slo: {ttft_ms: .inf, tpot_ms: .inf}
)";

/// A peer's record line: request `id`, `n` tokens 10 ms apart from `start`.
std::string peer_line(const std::string& run, int id, int n, double start) {
  nlohmann::json times = nlohmann::json::array();
  for (int i = 0; i < n; ++i) times.push_back(start + 0.01 * (i + 1));
  return nlohmann::json{{"run", run},           {"id", id},        {"arrival_s", 0.0},   {"sent_s", 0.0},
                        {"scheduled_s", start}, {"first_token_s", times[0]}, {"token_times_s", times},
                        {"end_s", times.back()}, {"prompt_tokens", 8}, {"output_tokens", n}, {"status", "ok"},
                        {"error", nullptr},     {"preemptions", 0}}
             .dump() +
         "\n";
}

class ReportMerge : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(servelab_exe())) GTEST_SKIP() << servelab_exe() << " not built (build target servelab)";
    write_text(tmp.file("s.yaml"), kScenario);
    run_dir = tmp.file("run");
    const CliResult r = run_servelab({"run", tmp.file("s.yaml"), "--out", run_dir, "--quiet", "--no-plots"}, tmp);
    ASSERT_EQ(r.code, 0) << r.output;
    // A peer that finished 4 of its 6 planned requests, described by a sidecar ...
    std::string a;
    for (int i = 0; i < 4; ++i) a += peer_line("hf-static@inf", i, 3, 0.5 * i);
    write_text(tmp.file("hf-static.jsonl"), a);
    write_text(tmp.file("hf-static.run.json"),
               R"({"runs": [{"label": "hf-static@inf", "strategy": "hf-static", "batching": "static",
                   "backend": "hf-transformers", "mode": "max", "n_requests": 6, "config": {"batch_size": 32}}]})");
    // ... and one with no sidecar: its run comes from the label.
    std::string b;
    for (int i = 0; i < 6; ++i) b += peer_line("hf-continuous@inf", i, 2, 0.1);
    write_text(tmp.file("hf-cb.jsonl"), b);
  }

  TempDir tmp;
  std::string run_dir;
};

TEST_F(ReportMerge, JoinsPeerRunsIntoOneReport) {
  const std::string records_before = read_text(run_dir + "/records.jsonl");
  const std::string runs_before = read_text(run_dir + "/runs.json");
  const std::string out = tmp.file("combined");
  const CliResult r = run_servelab({"report", run_dir, "--add", tmp.file("hf-static.jsonl"), "--add",
                                    tmp.file("hf-cb.jsonl"), "--out", out, "--no-plots"},
                                   tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("hf-static"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hf-static@inf: 4 measured records for 6 planned requests"), std::string::npos) << r.output;

  const auto s = nlohmann::json::parse(read_text(out + "/summary.json"));
  ASSERT_EQ(s["runs"].size(), 3u) << s.dump(1);
  EXPECT_EQ(s["runs"][0]["label"], "continuous-paged@inf");
  const auto& st = s["runs"][1];
  EXPECT_EQ(st["label"], "hf-static@inf");
  EXPECT_EQ(st["strategy"], "hf-static");
  EXPECT_EQ(st["batching"], "static");
  EXPECT_EQ(st["backend"], "hf-transformers");
  EXPECT_EQ(st["mode"], "max");
  EXPECT_EQ(st["n_planned"], 6);
  EXPECT_EQ(st["n_requests"], 4);
  EXPECT_EQ(st["config"]["batch_size"], 32);
  EXPECT_EQ(st["metrics"]["n_output_tokens"], 12);
  // 12 tokens over the window from arrival 0 to the last finish, 1.5 + 0.03 s.
  EXPECT_NEAR(st["metrics"]["output_throughput_tok_s"].get<double>(), 12 / 1.53, 1e-3);
  const auto& cb = s["runs"][2];
  EXPECT_EQ(cb["label"], "hf-continuous@inf");
  EXPECT_EQ(cb["strategy"], "hf-continuous");
  EXPECT_EQ(cb["mode"], "max");
  EXPECT_EQ(cb["n_planned"], 6);
  EXPECT_EQ(cb["n_requests"], 6);

  // NEW holds every record and re-renders alone, byte for byte; DIR is untouched.
  EXPECT_EQ(read_lines(out + "/records.jsonl").size(), read_lines(run_dir + "/records.jsonl").size() + 10);
  EXPECT_TRUE(fs::exists(out + "/steps.jsonl"));
  const std::string summary = read_text(out + "/summary.json");
  const CliResult again = run_servelab({"report", out, "--no-plots", "--quiet"}, tmp);
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_EQ(read_text(out + "/summary.json"), summary);
  EXPECT_EQ(read_text(run_dir + "/records.jsonl"), records_before);
  EXPECT_EQ(read_text(run_dir + "/runs.json"), runs_before);
}

TEST_F(ReportMerge, RefusesWhatWouldMixOrOverwrite) {
  const std::string a = tmp.file("hf-static.jsonl");
  CliResult r = run_servelab({"report", run_dir, "--add", a}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--add needs --out"), std::string::npos) << r.output;

  r = run_servelab({"report", run_dir, "--add", a, "--out", run_dir}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("another folder"), std::string::npos) << r.output;

  // The same file twice: its run would get two sources.
  r = run_servelab({"report", run_dir, "--add", a, "--add", a, "--out", tmp.file("o1")}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("already in the report"), std::string::npos) << r.output;

  // A peer labelled like one of the run's own strategies.
  write_text(tmp.file("clash.jsonl"), peer_line("continuous-paged@inf", 0, 2, 0.0));
  r = run_servelab({"report", run_dir, "--add", tmp.file("clash.jsonl"), "--out", tmp.file("o2")}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("clash.jsonl: run continuous-paged@inf is already in the report"), std::string::npos)
      << r.output;

  // A malformed sidecar and a malformed record are named.
  write_text(tmp.file("bad.jsonl"), peer_line("peer@inf", 0, 2, 0.0));
  write_text(tmp.file("bad.run.json"), R"({"runs": [{"label": "peer@inf", "batching": "sometimes"}]})");
  r = run_servelab({"report", run_dir, "--add", tmp.file("bad.jsonl"), "--out", tmp.file("o3")}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("bad.run.json: run peer@inf: batching must be"), std::string::npos) << r.output;
  write_text(tmp.file("broken.jsonl"), "{\"run\": \"x@inf\", \"id\": 0}\n");
  r = run_servelab({"report", run_dir, "--add", tmp.file("broken.jsonl"), "--out", tmp.file("o4")}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("broken.jsonl:1"), std::string::npos) << r.output;

  // An --out that holds files needs --force.
  const std::string out = tmp.file("o5");
  fs::create_directories(out);
  write_text(out + "/keep.txt", "x");
  r = run_servelab({"report", run_dir, "--add", a, "--out", out, "--no-plots"}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--force"), std::string::npos) << r.output;
  r = run_servelab({"report", run_dir, "--add", a, "--out", out, "--no-plots", "--force"}, tmp);
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST(PeerLabel, RunFromLabelGivesModeAndRate) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  write_text(tmp.file("s.yaml"), kScenario);
  const std::string run = tmp.file("run");
  ASSERT_EQ(run_servelab({"run", tmp.file("s.yaml"), "--out", run, "--quiet", "--no-plots"}, tmp).code, 0);
  std::string lines;
  for (int i = 0; i < 3; ++i) lines += peer_line("vllm@4", i, 2, 0.2 * i);
  write_text(tmp.file("vllm.jsonl"), lines);
  const CliResult r =
      run_servelab({"report", run, "--add", tmp.file("vllm.jsonl"), "--out", tmp.file("o"), "--no-plots", "-q"}, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto s = nlohmann::json::parse(read_text(tmp.file("o") + "/summary.json"));
  ASSERT_EQ(s["runs"].size(), 2u);
  EXPECT_EQ(s["runs"][1]["mode"], "open");
  EXPECT_EQ(s["runs"][1]["rate"], 4.0);
  EXPECT_EQ(s["runs"][1]["strategy"], "vllm");
  EXPECT_EQ(s["runs"][1]["n_planned"], 3);
}


// scripts/hf-offline-peer.py's record and .run.json writers (the parts that need no GPU) against
// servelab's readers: a plan exported by `servelab plan --json`, replayed into records as the peer
// writes them, joins a run's report.
TEST(PeerScript, RecordsAndRunFileReadBack) {
  SERVELAB_REQUIRE_BINARY();
  if (!on_path("python3")) GTEST_SKIP() << "python3 not on PATH";
  TempDir tmp;
  write_text(tmp.file("s.yaml"), kScenario);
  const std::string run = tmp.file("run");
  ASSERT_EQ(run_servelab({"run", tmp.file("s.yaml"), "--out", run, "--quiet", "--no-plots"}, tmp).code, 0);
  CliResult plan = run_servelab({"plan", tmp.file("s.yaml"), "--json"}, tmp);
  ASSERT_EQ(plan.code, 0) << plan.output;
  write_text(tmp.file("plan.json"), plan.output);
  const std::string script = std::string(SERVELAB_SOURCE_DIR) + "/scripts/hf-offline-peer.py";
  const std::string py =
      "import importlib.util, sys\n"
      "spec = importlib.util.spec_from_file_location('peer', sys.argv[1])\n"
      "peer = importlib.util.module_from_spec(spec); spec.loader.exec_module(peer)\n"
      "scenario, reqs = peer.load_plan(sys.argv[2], 0)\n"
      "out = sys.argv[3]\n"
      "with open(out + '.jsonl', 'w') as f:\n"
      "    for k, (rid, p, o) in enumerate(reqs[:4]):\n"
      "        t = peer.monotone(0.1 * k, [0.1 * k + 0.01 * (i + 1) for i in range(o)])\n"
      "        f.write(peer.record('hf-static@inf', rid, len(p), o, 0.1 * k, t, t[-1] + 0.001))\n"
      "peer.write_run_file(out + '.run.json', 'hf-static@inf', 'static', len(reqs), {'scenario': scenario})\n";
  write_text(tmp.file("emit.py"), py);
  const std::string cmd = "python3 " + shell_quote(tmp.file("emit.py")) + " " + shell_quote(script) + " " +
                          shell_quote(tmp.file("plan.json")) + " " + shell_quote(tmp.file("peer")) + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const CliResult r = run_servelab(
      {"report", run, "--add", tmp.file("peer.jsonl"), "--out", tmp.file("o"), "--no-plots", "-q"}, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto s = nlohmann::json::parse(read_text(tmp.file("o") + "/summary.json"));
  ASSERT_EQ(s["runs"].size(), 2u);
  const auto& peer = s["runs"][1];
  EXPECT_EQ(peer["label"], "hf-static@inf");
  EXPECT_EQ(peer["backend"], "hf-transformers");
  EXPECT_EQ(peer["batching"], "static");
  EXPECT_EQ(peer["n_planned"], 6);  // the plan's requests
  EXPECT_EQ(peer["n_requests"], 4);
  EXPECT_EQ(peer["config"]["scenario"], "offline-mini");
  // The peer's prompt lengths are the plan's: the same as servelab's own records of those ids.
  int servelab_prompt = 0;
  for (const auto& line : read_lines(run + "/records.jsonl")) {
    const auto j = nlohmann::json::parse(line);
    if (j["id"].get<int>() < 4) servelab_prompt += j["prompt_tokens"].get<int>();
  }
  EXPECT_GT(servelab_prompt, 0);
  EXPECT_EQ(peer["metrics"]["n_prompt_tokens"].get<int>(), servelab_prompt);
}

}  // namespace
}  // namespace servelab::cli_test
