// Damaged inputs a scenario can point at: each is refused with a clear message naming the file
// (and the line where there is one) and exit code 2; never a crash, a bad_alloc or exit 0.
#include <fstream>

#include "engine/model/hf_config.h"
#include "engine/model/synth.h"
#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace {

/// A small sim scenario; `workload_extra` and `model` replace the defaults.
std::string scenario_text(const std::string& workload, const std::string& model = "{preset: tiny}",
                          const std::string& backend = "{kind: sim}") {
  return "name: damaged\nmodel: " + model + "\nbackend: " + backend +
         "\nstrategies: [{label: c, batching: continuous}]\nworkload:\n" + workload;
}

/// Runs `servelab validate` and `servelab run` on the scenario; both must exit 2 and say `needle`.
void expect_refused(const std::string& yaml, const std::string& needle,
                    const std::vector<std::pair<std::string, std::string>>& files = {}) {
  SCOPED_TRACE(yaml);
  TempDir tmp;
  for (const auto& [name, text] : files) write_text(tmp.file(name), text);
  write_text(tmp.file("s.yaml"), yaml);
  for (const char* cmd : {"validate", "run"}) {
    std::vector<std::string> args = {cmd, tmp.file("s.yaml")};
    if (std::string(cmd) == "run") args.insert(args.end(), {"--out", tmp.file("out"), "--quiet", "--no-plots"});
    const CliResult r = run_servelab(args, tmp);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << cmd << ": expected \"" << needle << "\"\n" << r.output;
  }
}

TEST(DamagedInputs, MissingFilesAreNamed) {
  SERVELAB_REQUIRE_BINARY();
  expect_refused(scenario_text("  rates: [1]\n  n_requests: 2\n  prompt_tokens: {dataset: nowhere.json}\n"
                               "  output_tokens: 4\n"),
                 "nowhere.json");
  expect_refused(scenario_text("  trace: nowhere.jsonl\n"), "nowhere.jsonl");
  expect_refused(scenario_text("  rates: [1]\n  n_requests: 2\n  prompt_tokens: 4\n  output_tokens: 4\n",
                               "{path: no_model_here}", "{kind: cpu}"),
                 "no_model_here");
}

TEST(DamagedInputs, TraceWithUnsortedOrNegativeOrNanTimestamps) {
  SERVELAB_REQUIRE_BINARY();
  const std::string yaml = scenario_text("  trace: t.jsonl\n");
  expect_refused(yaml, "t.jsonl:2",
                 {{"t.jsonl", "{\"timestamp\": 5, \"prompt_tokens\": 4, \"output_tokens\": 2}\n"
                              "{\"timestamp\": 1, \"prompt_tokens\": 4, \"output_tokens\": 2}\n"}});
  expect_refused(yaml, "t.jsonl:1",
                 {{"t.jsonl", "{\"timestamp\": -1, \"prompt_tokens\": 4, \"output_tokens\": 2}\n"
                              "{\"timestamp\": 1, \"prompt_tokens\": 4, \"output_tokens\": 2}\n"}});
  expect_refused(yaml, "t.jsonl:1",
                 {{"t.jsonl", "{\"timestamp\": NaN, \"prompt_tokens\": 4, \"output_tokens\": 2}\n"}});
  expect_refused(yaml, "t.jsonl:1",
                 {{"t.jsonl", "{\"timestamp\": 1e400, \"prompt_tokens\": 4, \"output_tokens\": 2}\n"}});
  expect_refused(yaml, "t.jsonl:1",
                 {{"t.jsonl", "{\"timestamp\": 0, \"prompt_tokens\": 1e30, \"output_tokens\": 2}\n"}});
}

TEST(DamagedInputs, NanAndHugeNumbersInTheScenario) {
  SERVELAB_REQUIRE_BINARY();
  const std::string tail = "  n_requests: 2\n  prompt_tokens: 4\n  output_tokens: 4\n";
  expect_refused(scenario_text("  rates: [.nan]\n" + tail), "rates");
  expect_refused(scenario_text("  rates: [1e400]\n" + tail), "rates");
  expect_refused(scenario_text("  rates: [1]\n  n_requests: 1e30\n  prompt_tokens: 4\n  output_tokens: 4\n"),
                 "n_requests");
  expect_refused(scenario_text("  rates: [1]\n  n_requests: 99999999999999999999\n  prompt_tokens: 4\n"
                               "  output_tokens: 4\n"),
                 "n_requests");
  expect_refused(scenario_text("  rates: [1]\n  n_requests: 2\n  prompt_tokens: {dist: normal, mean: .nan, std: 1}\n"
                               "  output_tokens: 4\n"),
                 "mean");
}

TEST(DamagedInputs, DatasetWithNanOrHugeLengths) {
  SERVELAB_REQUIRE_BINARY();
  const std::string yaml = scenario_text("  rates: [1]\n  n_requests: 2\n  prompt_tokens: {dataset: d.jsonl}\n"
                                         "  output_tokens: {dataset: d.jsonl}\n");
  expect_refused(yaml, "d.jsonl:1", {{"d.jsonl", "{\"prompt_tokens\": NaN, \"output_tokens\": 2}\n"}});
  expect_refused(yaml, "d.jsonl:2", {{"d.jsonl", "{\"prompt_tokens\": 3, \"output_tokens\": 2}\n"
                                                 "{\"prompt_tokens\": 1e300, \"output_tokens\": 2}\n"}});
  expect_refused(yaml, "d.jsonl:1", {{"d.jsonl", "{\"prompt_tokens\": -4, \"output_tokens\": 2}\n"}});
  // Found by fuzz_dataset: a number past double's range escaped as nlohmann's out_of_range, without
  // the file and line.
  expect_refused(yaml, "d.jsonl:1", {{"d.jsonl", "{\"prompt_tokens\": 1e400, \"output_tokens\": 2}\n"}});
}

TEST(DamagedInputs, ModelLargerThanMemoryRefusedWithTheFigure) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  fs::create_directories(tmp.file("huge"));
  // ~1.6e14 parameters: far more than any machine's memory; no safetensors needed to refuse it.
  write_text(tmp.file("huge/config.json"), R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 65536,
    "num_hidden_layers": 1000, "num_attention_heads": 64, "num_key_value_heads": 64,
    "intermediate_size": 262144, "vocab_size": 32000, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0})");
  write_text(tmp.file("s.yaml"), scenario_text("  rates: [1]\n  n_requests: 2\n  prompt_tokens: 4\n  output_tokens: 4\n",
                                               "{path: huge}", "{kind: cpu}"));
  const CliResult r = run_servelab({"run", tmp.file("s.yaml"), "--out", tmp.file("out"), "--quiet", "--no-plots"}, tmp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("GiB for its fp32 weights"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of memory"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("bad_alloc"), std::string::npos) << r.output;
}

// Found by fuzz_report: an integer field holding 4.4e42 was cast to int (undefined behaviour; a
// garbage count in release builds). Now refused with the file and line.
TEST(DamagedInputs, ReportRefusesOutOfRangeIntegers) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  write_text(tmp.file("s.yaml"), scenario_text("  rates: [5]\n  n_requests: 3\n  prompt_tokens: 8\n  output_tokens: 2\n"));
  const std::string out = tmp.file("out");
  ASSERT_EQ(run_servelab({"run", tmp.file("s.yaml"), "--out", out, "--quiet", "--no-plots"}, tmp).code, 0);
  const std::string records = read_text(out + "/records.jsonl");
  for (const char* bad : {"4.4e42", "2.5", "-1e300", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    std::string damaged = records;
    const std::string key = "\"prompt_tokens\":";
    const size_t at = damaged.find(key) + key.size();
    damaged.replace(at, damaged.find(',', at) - at, bad);
    write_text(out + "/records.jsonl", damaged);
    const CliResult r = run_servelab({"report", out, "--no-plots", "--quiet"}, tmp);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("records.jsonl:1:"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace servelab::cli_test
