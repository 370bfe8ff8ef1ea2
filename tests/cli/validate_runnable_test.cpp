// `validate` makes every check `run` makes before its first request (model files, sim profile,
// device, KV arena against memory), and a run that stops before its first request leaves no
// folder behind to block the retry.
#include "engine/backend/make_backend.h"
#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace {

const std::string kWorkload =
    "strategies: [{batching: continuous}]\nworkload: {rates: [1], n_requests: 2, prompt_tokens: 8, output_tokens: 4}\n";

/// A model folder with tiny's config.json and `safetensors` bytes as its weights ("" = none).
std::string model_folder(const TempDir& tmp, const std::string& safetensors) {
  const std::string dir = tmp.file("model");
  fs::create_directories(dir);
  fs::copy_file(std::string(SERVELAB_SOURCE_DIR) + "/tests/data/hf_golden/tiny_config.json", dir + "/config.json");
  if (!safetensors.empty()) write_text(dir + "/model.safetensors", safetensors);
  return dir;
}

/// validate exits 2 saying the scenario cannot run here, with `what` in the message.
void expect_validate_refuses(const std::string& scenario_text, const std::string& what, const TempDir& tmp) {
  const std::string path = tmp.file("s.yaml");
  write_text(path, scenario_text);
  const CliResult r = run_servelab({"validate", path}, tmp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot run here"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(what), std::string::npos) << r.output;
}

TEST(ValidateRunnable, ModelFolderWithoutWeightsFailsValidateAndRunLeavesNoFolder) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string text = "model: {path: " + model_folder(tmp, "") + "}\nbackend: {kind: cpu, threads: 1}\n" + kWorkload;
  expect_validate_refuses(text, "safetensors", tmp);
  const std::string out = tmp.file("out");
  const CliResult r = run_servelab({"run", tmp.file("s.yaml"), "--out", out, "-q", "--no-plots"}, tmp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_FALSE(fs::exists(out)) << "a run that failed before its first request left " << out;
}

TEST(ValidateRunnable, TruncatedSafetensorsFailValidate) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  // A header length of 4096 bytes in a file of 12: cut short by a failed download.
  std::string bytes("\x00\x10\x00\x00\x00\x00\x00\x00{\"a\"", 12);
  expect_validate_refuses("model: {path: " + model_folder(tmp, bytes) + "}\nbackend: {kind: cpu, threads: 1}\n" + kWorkload,
                          "model.safetensors", tmp);
}

TEST(ValidateRunnable, SimProfileOfAnotherModelFailsValidate) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  expect_validate_refuses("model: {preset: llama2-7b}\nbackend: {kind: sim, sim_profile: " + std::string(SERVELAB_SOURCE_DIR) +
                              "/tests/data/profiles/qwen2.5-0.5b-profile-v1.json}\nengine: {kv_cache_mb: 4096}\n" + kWorkload,
                          "qwen", tmp);
}

TEST(ValidateRunnable, GpuScenarioWithoutAGpuFailsValidate) {
  SERVELAB_REQUIRE_BINARY();
  if (cuda_devices() > 0) GTEST_SKIP() << "this machine has a GPU";
  TempDir tmp;
  expect_validate_refuses("model: {preset: tiny}\nbackend: {kind: cuda}\n" + kWorkload, "cuda", tmp);
  // --schema-only checks the file alone.
  EXPECT_EQ(run_servelab({"validate", tmp.file("s.yaml"), "--schema-only"}, tmp).code, 0);
}

TEST(ValidateRunnable, KvArenaLargerThanMemoryFailsValidate) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  // 64 TiB of KV arena on the CPU backend: no machine running this test holds it.
  expect_validate_refuses("model: {preset: tiny}\nbackend: {kind: cpu, threads: 1}\nengine: {kv_cache_mb: 67108864}\n" +
                              kWorkload,
                          "exceeds this machine's", tmp);
}

}  // namespace
}  // namespace servelab::cli_test
