// `servelab profile` option handling that needs no GPU: --backend cuda is accepted and fails with
// make_backend's message where there is no CUDA build or device, --device needs cuda, --kv-gb
// caps the arena and lists the grid points it skips.
#include <string>

#include <gtest/gtest.h>

#include "engine/backend/make_backend.h"
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ProfileCli, CudaWithoutADeviceFailsWithTheBackendsMessage) {
  SERVELAB_REQUIRE_BINARY();
  if (servelab::cuda_devices() > 0) GTEST_SKIP() << "a GPU is present: the profile would run";
  TempDir dir;
  const CliResult r = run_servelab({"profile", "--backend", "cuda", "--preset", "tiny"}, dir);
  EXPECT_EQ(r.code, 2) << r.output;
  // Without CUDA: "built without CUDA"; with CUDA but no GPU: "no CUDA device is visible".
  EXPECT_TRUE(has(r.output, "backend cuda: this servelab was built without CUDA") ||
              has(r.output, "backend cuda: no CUDA device is visible"))
      << r.output;
}

TEST(ProfileCli, RejectsDeviceWithoutCudaAndANegativeBudget) {
  SERVELAB_REQUIRE_BINARY();
  TempDir dir;
  CliResult r = run_servelab({"profile", "--preset", "tiny", "--device", "1"}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.output, "--device applies to --backend cuda")) << r.output;
  r = run_servelab({"profile", "--preset", "tiny", "--kv-gb", "-1"}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.output, "--kv-gb must be >= 0")) << r.output;
  r = run_servelab({"profile", "--preset", "tiny", "--warmup", "-1"}, dir);
  EXPECT_EQ(r.code, 2);
}

TEST(ProfileCli, KvBudgetSkipsAndListsPointsAndWritesThemToTheJson) {
  SERVELAB_REQUIRE_BINARY();
  TempDir dir;
  const std::string json = dir.file("p.json");
  // tiny on the cpu: 2 KiB of fp32 K/V per token, so 0.0005 GB holds 244 slots: a decode at
  // context 256 (17 blocks of 16) does not fit, one at context 8 does.
  const CliResult r = run_servelab({"profile", "--preset", "tiny", "--threads", "1", "--prefill-lens", "16", "--batch",
                                    "1,4", "--contexts", "8,256", "--chunk-lens", "8", "--repeats", "1", "--kv-gb",
                                    "0.0005", "--json", json},
                                   dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "grid point(s) skipped")) << r.output;
  EXPECT_TRUE(has(r.output, "decode 4 seqs, 4 rows, context 256")) << r.output;
  const std::string text = read_text(json);
  EXPECT_TRUE(has(text, "\"skipped\"")) << text;
  EXPECT_TRUE(has(text, "\"kv_arena_bytes\"")) << text;
  EXPECT_FALSE(has(text, "\"sustained\"")) << text;  // the probe is opt-in
}

TEST(ProfileCli, SustainedProbeIsWrittenAndASimRunPricesFromIt) {
  SERVELAB_REQUIRE_BINARY();
  TempDir dir;
  const std::string json = dir.file("p.json");
  CliResult r = run_servelab({"profile", "--preset", "tiny", "--threads", "1", "--prefill-lens", "16,64", "--batch",
                              "1,4", "--contexts", "8,32", "--chunk-lens", "8", "--repeats", "1", "--warmup-s", "0",
                              "--no-host-overhead", "--sustained-s", "0.2", "--json", json},
                             dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "sustained load (0.2 s")) << r.output;
  const nlohmann::json j = nlohmann::json::parse(read_text(json));
  ASSERT_TRUE(j.contains("sustained")) << j.dump();
  EXPECT_GT(j["sustained"]["heavy"]["hot_s"].get<double>(), 0.0);
  EXPECT_GT(j["sustained"]["trace"].size(), 3u);
  r = run_servelab({"profile", "--preset", "tiny", "--sustained-s", "-1"}, dir);
  EXPECT_EQ(r.code, 2) << r.output;
}

TEST(ProfileCli, ForScenarioTakesTheGridFromItsLengthsAndGivenFlagsWin) {
  SERVELAB_REQUIRE_BINARY();
  TempDir dir;
  write_text(dir.file("s.yaml"), R"(name: s
seed: 2
model: {preset: tiny}
backend: {kind: cpu, threads: 1}
engine: {kv_cache_mb: 8, max_model_len: 256}
strategies:
  - {label: c, batching: continuous, max_num_seqs: 6}
workload:
  rates: [5]
  n_requests: 20
  prompt_tokens: {dist: fixed, value: 24}
  output_tokens: {dist: fixed, value: 8}
)");
  const std::string json = dir.file("p.json");
  const CliResult r = run_servelab({"profile", "--preset", "tiny", "--threads", "1", "--for-scenario", dir.file("s.yaml"),
                                    "--batch", "1,2", "--repeats", "1", "--no-host-overhead", "--no-padded-decodes",
                                    "--json", json},
                                   dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "grid from")) << r.output;
  EXPECT_TRUE(has(r.output, "--prefill-lens 24:")) << r.output;
  EXPECT_TRUE(has(r.output, "--contexts 28,32:")) << r.output;
  const auto o = nlohmann::json::parse(read_text(json)).at("options");
  EXPECT_EQ(o.at("prefill_lens"), nlohmann::json::parse("[24]"));
  EXPECT_EQ(o.at("contexts"), nlohmann::json::parse("[28, 32]")) << "prompt + output / 2, and prompt + output";
  EXPECT_EQ(o.at("batch_sizes"), nlohmann::json::parse("[1, 2]")) << "--batch given: the scenario's 1..6 not used";
  EXPECT_EQ(o.at("chunk_lens"), nlohmann::json::parse("[24]"));
  // No --preset or --model: the scenario's model is profiled, not the default preset.
  std::string yaml2 = read_text(dir.file("s.yaml"));
  yaml2.replace(yaml2.find("{preset: tiny}"), 14, "{preset: copy-tiny}");
  write_text(dir.file("s2.yaml"), yaml2);
  const std::string json2 = dir.file("p2.json");
  const CliResult r2 = run_servelab({"profile", "--threads", "1", "--for-scenario", dir.file("s2.yaml"), "--batch", "1",
                                     "--prefill-lens", "8", "--contexts", "16", "--chunk-lens", "8", "--repeats", "1",
                                     "--no-host-overhead", "--no-padded-decodes", "--json", json2},
                                    dir);
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_TRUE(has(nlohmann::json::parse(read_text(json2)).at("model").dump(), "copy-tiny")) << r2.output;
  const CliResult bad = run_servelab({"profile", "--preset", "tiny", "--for-scenario", dir.file("none.yaml")}, dir);
  EXPECT_EQ(bad.code, 2) << bad.output;
}

TEST(ProfileCli, ALoraScenariosProfileTimesAdaptersAndTheSimRunsOnIt) {
  // --for-scenario on a workload with adapters takes their rank and max_loras; the JSON keeps the
  // LoRA points and the fit; the scenario then runs on the sim priced from that profile.
  SERVELAB_REQUIRE_BINARY();
  TempDir dir;
  const std::string scenario = R"(name: l
seed: 2
model: {preset: tiny}
backend: {kind: cpu, threads: 1}
engine: {kv_cache_mb: 8, max_model_len: 256}
strategies:
  - {label: c, batching: continuous, max_num_seqs: 4}
workload:
  rates: [20]
  n_requests: 12
  prompt_tokens: {dist: fixed, value: 24}
  output_tokens: {dist: fixed, value: 8}
  lora: {count: 3, rank: 4, max_loras: 2}
)";
  write_text(dir.file("l.yaml"), scenario);
  const std::string json = dir.file("p.json");
  const CliResult r = run_servelab({"profile", "--threads", "1", "--for-scenario", dir.file("l.yaml"), "--repeats", "1",
                                    "--warmup-s", "0", "--no-host-overhead", "--no-padded-decodes", "--json", json},
                                   dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "--lora-rank 4 --lora-adapters 1,2:")) << r.output;
  EXPECT_TRUE(has(r.output, "LoRA, rank 4 on all seven linears")) << r.output;
  EXPECT_TRUE(has(r.output, "sim's LoRA fit")) << r.output;
  const auto j = nlohmann::json::parse(read_text(json));
  ASSERT_TRUE(j.contains("lora")) << j.dump();
  EXPECT_EQ(j.at("lora").at("rank"), 4);
  EXPECT_GE(j.at("lora").at("points").size(), 4u);
  EXPECT_EQ(j.at("options").at("warmup_s"), 0.0);
  std::string sim = scenario;
  sim.replace(sim.find("{kind: cpu, threads: 1}"), 23, "{kind: sim, sim_profile: " + json + "}");
  write_text(dir.file("sim.yaml"), sim);
  const CliResult run = run_servelab({"run", dir.file("sim.yaml"), "-o", dir.file("out"), "--quiet", "--no-plots"}, dir);
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(has(read_text(dir.file("out") + "/report.md"), "## Multi-LoRA, per adapter")) << run.output;
}

}  // namespace
}  // namespace servelab::cli_test
