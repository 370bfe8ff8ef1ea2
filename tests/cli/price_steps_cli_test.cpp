// `servelab price-steps`: a real run's recorded steps priced by a profile, by class; another
// device only with --retarget (then a profile of the 2-core cpu prices an H100's steps far
// faster); a bad line names its file and line. A cpu run's own steps.jsonl prices the same way
// (each step record carries its roofline.shape); a sim run's steps, which have none, are refused.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace price_steps_cli_test {  // named, not anonymous: a unity batch shares one translation unit

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// The "all" line's predicted seconds (the fourth field).
double all_predicted(const std::string& out) {
  const size_t at = out.find("\nall ");
  EXPECT_NE(at, std::string::npos) << out;
  std::istringstream in(out.substr(at + 1));
  std::string name;
  double steps = 0, measured = 0, predicted = 0;
  in >> name >> steps >> measured >> predicted;
  return predicted;
}

/// A small cpu profile of `tiny` in dir (p.json); "" when `servelab profile` failed (the output
/// then reported).
/// Three repeats a point (their median): with one, a loaded machine's noise once fitted a row function
/// that priced two-prompt prefills at 0 (the fit's floor), failing the per-step check below.
std::string tiny_profile(TempDir& dir) {
  const std::string prof = dir.file("p.json");
  const CliResult r = run_servelab({"profile", "--preset", "tiny", "--threads", "1", "--prefill-lens", "16,64", "--batch",
                                    "1,4", "--contexts", "8,64", "--chunk-lens", "8", "--repeats", "3",
                                    "--no-host-overhead", "--json", prof},
                                   dir);
  EXPECT_EQ(r.code, 0) << r.output;
  return r.code == 0 ? prof : "";
}

TEST(PriceStepsCli, PricesRecordedStepsByClassAndRetargetsOnlyWhenAsked) {
  SERVELAB_REQUIRE_BINARY();
  TempDir dir;
  const std::string prof = tiny_profile(dir);
  ASSERT_FALSE(prof.empty());
  CliResult r;
  write_text(dir.file("steps.jsonl"),
             R"({"run":"a","n_tokens":1,"n_padding_tokens":0,"n_seqs":1,"sum_context":33,"max_context":33,"prefill_pairs":0,"decode_context":33,"measured_s":0.002}
{"run":"a","n_tokens":4,"n_padding_tokens":0,"n_seqs":4,"sum_context":132,"max_context":33,"prefill_pairs":0,"decode_context":132,"measured_s":0.003}
{"run":"b","n_tokens":40,"n_padding_tokens":0,"n_seqs":1,"sum_context":40,"max_context":40,"prefill_pairs":820,"decode_context":0,"measured_s":0.004}
)");
  r = run_servelab({"price-steps", dir.file("steps.jsonl"), "--profile", prof, "--preset", "tiny"}, dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "decode, 1-4 seqs")) << r.output;
  EXPECT_TRUE(contains(r.output, "prefill, 1-256 tokens")) << r.output;
  EXPECT_TRUE(contains(r.output, "\nall ")) << r.output;
  const double on_cpu = all_predicted(r.output);
  EXPECT_GT(on_cpu, 0.0);
  // One run's steps only.
  r = run_servelab({"price-steps", dir.file("steps.jsonl"), "--profile", prof, "--preset", "tiny", "--run", "a"}, dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "prefill,")) << r.output;
  // Another device: refused without --retarget (the error says how), far faster with it.
  r = run_servelab({"price-steps", dir.file("steps.jsonl"), "--profile", prof, "--preset", "tiny", "--device", "h100"}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.output, "--retarget")) << r.output;
  r = run_servelab({"price-steps", dir.file("steps.jsonl"), "--profile", prof, "--preset", "tiny", "--device", "h100",
                    "--retarget"},
                   dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "retargeted to h100")) << r.output;
  EXPECT_LT(all_predicted(r.output), 0.5 * on_cpu);
  // A damaged line: its file and line number.
  write_text(dir.file("bad.jsonl"), "{\"n_tokens\":1,\"n_seqs\":1,\"sum_context\":2,\"max_context\":2,\"prefill_pairs\":0,"
                                    "\"decode_context\":2,\"measured_s\":0.001}\n{\"n_tokens\":1}\n");
  r = run_servelab({"price-steps", dir.file("bad.jsonl"), "--profile", prof, "--preset", "tiny"}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.output, "bad.jsonl:2:")) << r.output;
}

TEST(CalibrateCli, FoldsARunsStepsIntoTheProfileAndPrintsTheErrorBeforeAndAfter) {
  SERVELAB_REQUIRE_BINARY();
  TempDir dir;
  const std::string prof = tiny_profile(dir);
  ASSERT_FALSE(prof.empty());
  // Three steps, each 3x what the profile says (a far slower machine): calibrated, the fit follows them.
  std::string lines;
  for (const auto& [n, ctx, pairs, dctx] : {std::tuple{1, 33, 0, 33}, std::tuple{4, 132, 0, 132}, std::tuple{40, 40, 820, 0}}) {
    nlohmann::json j = {{"run", "a"}, {"n_tokens", n}, {"n_padding_tokens", 0}, {"n_seqs", n == 40 ? 1 : n},
                        {"sum_context", ctx}, {"max_context", n == 40 ? 40 : 33}, {"prefill_pairs", pairs},
                        {"decode_context", dctx}, {"measured_s", 1.0}};
    lines += j.dump() + "\n";
  }
  write_text(dir.file("steps.jsonl"), lines);
  CliResult r = run_servelab({"price-steps", dir.file("steps.jsonl"), "--profile", prof, "--preset", "tiny"}, dir);
  ASSERT_EQ(r.code, 0) << r.output;
  const double before = all_predicted(r.output);
  ASSERT_LT(before, 1.5);  // a 1 s step is far from the tiny model's milliseconds
  r = run_servelab({"calibrate", dir.file("steps.jsonl"), "--profile", prof, "--preset", "tiny", "--json", dir.file("c.json")}, dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "3 steps added")) << r.output;
  EXPECT_TRUE(contains(r.output, "as calibrated:")) << r.output;
  std::ifstream in(dir.file("c.json"));
  const nlohmann::json c = nlohmann::json::parse(in);
  ASSERT_EQ(c["calibration"].size(), 1u);
  EXPECT_EQ(c["calibration"][0]["samples"], 3);
  EXPECT_EQ(c["samples"].back()["source"], "calibration");
  r = run_servelab({"price-steps", dir.file("steps.jsonl"), "--profile", dir.file("c.json"), "--preset", "tiny"}, dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_GT(all_predicted(r.output), 2.0 * before) << r.output;
  // Beside a run folder's runs.json that names another model or backend: refused with the reason.
  const std::string runs_json = R"j({"schema": "servelab.runs/1", "scenario": {"model": "llama2-7b", "backend": "cpu"},
                                    "environment": {"device": "cpu (OpenBLAS fp32)"}, "runs": []})j";
  write_text(dir.file("runs.json"), runs_json);
  r = run_servelab({"calibrate", dir.file("steps.jsonl"), "--profile", prof, "--preset", "tiny", "--json", dir.file("e.json")}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.output, "the steps ran llama2-7b")) << r.output;
  std::string other_backend = runs_json;
  other_backend.replace(other_backend.find("llama2-7b"), 9, "tiny");
  other_backend.replace(other_backend.find("\"cpu\""), 5, "\"cuda\"");
  write_text(dir.file("runs.json"), other_backend);
  r = run_servelab({"calibrate", dir.file("steps.jsonl"), "--profile", prof, "--preset", "tiny", "--json", dir.file("e.json")}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.output, "ran on the cuda backend")) << r.output;
  std::remove(dir.file("runs.json").c_str());
  // A tensor-parallel degree other than the profile's: refused.
  r = run_servelab({"calibrate", dir.file("steps.jsonl"), "--profile", prof, "--preset", "tiny", "--tensor-parallel", "2",
                    "--json", dir.file("t.json")},
                   dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(std::ifstream(dir.file("t.json")).good());
  // Another model's profile: refused with the reason; nothing written.
  r = run_servelab({"calibrate", dir.file("steps.jsonl"), "--profile", prof, "--preset", "llama2-7b", "--json", dir.file("d.json")}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(std::ifstream(dir.file("d.json")).good());
}

TEST(PriceStepsCli, PricesACpuRunsOwnStepsAndRefusesASimRunsWithTheReason) {
  SERVELAB_REQUIRE_BINARY();
  TempDir dir;
  const std::string prof = tiny_profile(dir);
  ASSERT_FALSE(prof.empty());
  CliResult r;
  const std::string scenario = R"(name: priced
seed: 5
model: {preset: tiny}
backend: {kind: cpu, threads: 1}
engine: {kv_cache_mb: 8, max_model_len: 256}
strategies:
  - {batching: continuous, max_num_seqs: 4, max_num_batched_tokens: 256}
workload:
  rates: [200]
  n_requests: 6
  prompt_tokens: {dist: uniform, min: 16, max: 48}
  output_tokens: {dist: uniform, min: 4, max: 12}
)";
  write_text(dir.file("s.yaml"), scenario);
  r = run_servelab({"run", dir.file("s.yaml"), "--out", dir.file("cpu"), "--no-plots", "--quiet"}, dir);
  ASSERT_EQ(r.code, 0) << r.output;
  // Every executed step's record carries its shape: as many sequences as the batch.
  std::ifstream steps(dir.file("cpu/steps.jsonl"));
  std::string line;
  int n_shaped = 0;
  while (std::getline(steps, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("roofline")) continue;
    ASSERT_TRUE(j["roofline"].contains("shape")) << line;
    EXPECT_EQ(j["roofline"]["shape"]["n_seqs"].get<int>(), j["batch_size"].get<int>()) << line;
    EXPECT_GE(j["roofline"]["shape"]["sum_context"].get<int64_t>(), j["max_context"].get<int64_t>()) << line;
    ++n_shaped;
  }
  EXPECT_GT(n_shaped, 0);
  r = run_servelab({"price-steps", dir.file("cpu/steps.jsonl"), "--profile", prof, "--preset", "tiny", "--per-step",
                    dir.file("priced.jsonl")},
                   dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "decode, ")) << r.output;
  EXPECT_GT(all_predicted(r.output), 0.0);
  // --per-step: one line a priced step, each with both times and its shape.
  std::ifstream priced(dir.file("priced.jsonl"));
  int n_priced = 0;
  while (std::getline(priced, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_GT(j["measured_s"].get<double>(), 0.0) << line;
    EXPECT_GT(j["predicted_s"].get<double>(), 0.0) << line;
    EXPECT_GE(j["n_seqs"].get<int>(), 1) << line;
    ++n_priced;
  }
  EXPECT_EQ(n_priced, n_shaped);
  // The sim's steps are priced already: no shape to price them by, and the error says so.
  r = run_servelab({"run", dir.file("s.yaml"), "--out", dir.file("sim"), "--no-plots", "--quiet", "--set",
                    "backend.kind=sim"},
                   dir);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_servelab({"price-steps", dir.file("sim/steps.jsonl"), "--profile", prof, "--preset", "tiny"}, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.output, "steps.jsonl:1: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "roofline.shape")) << r.output;
}

}  // namespace price_steps_cli_test
}  // namespace servelab::cli_test
