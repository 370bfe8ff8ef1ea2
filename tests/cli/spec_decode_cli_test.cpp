// A strategy's `speculative:` block end to end: `servelab run` verifies n-gram drafts each step
// and reports vLLM's spec_decode counters per run in summary.json (and per step in steps.jsonl).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace spec_decode_cli_test {  // named, not anonymous: a unity batch shares one translation unit

using nlohmann::json;

// The counters' reporting, with drafts on every step (adaptive: false): on random prompts the
// measured rule would keep most of them off (drafts run for all only above 1.1x plain's rate).
TEST(SpecDecodeCli, NgramStrategyReportsItsDraftsAndAcceptance) {
  if (!fs::exists(servelab_exe())) GTEST_SKIP() << servelab_exe() << " not built";
  TempDir tmp;
  write_text(tmp.file("spec.yaml"), R"(name: spec
seed: 5
model: {preset: tiny}
backend: {kind: sim, sim_device: cpu-2core}
engine: {kv_cache_mb: 4, max_model_len: 256}
strategies:
  - {label: plain, batching: continuous, max_num_seqs: 8}
  - label: ngram
    batching: continuous
    max_num_seqs: 8
    speculative: {method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 1, prompt_lookup_max: 2, adaptive: false}
workload:
  rates: [10]
  n_requests: 16
  prompt_tokens: {dist: uniform, min: 32, max: 64}
  output_tokens: {dist: uniform, min: 32, max: 64}
)");
  const CliResult r = run_servelab({"run", tmp.file("spec.yaml"), "--out", tmp.file("out"), "-q"}, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  const json s = json::parse(read_text(tmp.file("out/summary.json")));
  ASSERT_EQ(s.at("runs").size(), 2u);
  EXPECT_FALSE(s.at("runs")[0].at("metrics").contains("spec_decode"));
  const json& sd = s.at("runs")[1].at("metrics").at("spec_decode");
  const int64_t drafts = sd.at("num_drafts"), drafted = sd.at("num_draft_tokens"), accepted = sd.at("num_accepted_tokens");
  EXPECT_GT(drafts, 0);
  EXPECT_GE(drafted, drafts);
  EXPECT_LE(accepted, drafted);
  EXPECT_DOUBLE_EQ(sd.at("mean_acceptance_length").get<double>(), 1.0 + double(accepted) / double(drafts));
  // Both runs generate the same tokens: drafts never change the output, only how many steps it takes.
  EXPECT_EQ(s.at("runs")[0].at("metrics").at("n_output_tokens"), s.at("runs")[1].at("metrics").at("n_output_tokens"));
  EXPECT_NE(read_text(tmp.file("out/steps.jsonl")).find("\"spec_decode\""), std::string::npos);
}

TEST(SpecDecodeCli, SelfSpeculationOnTheCpuGeneratesTheSameGreedyTokens) {
  if (!fs::exists(servelab_exe())) GTEST_SKIP() << servelab_exe() << " not built";
  TempDir tmp;
  write_text(tmp.file("self.yaml"), R"(name: self
seed: 3
model: {preset: tiny}
backend: {kind: cpu, threads: 1}
engine: {kv_cache_mb: 8, max_model_len: 128}
strategies:
  - {label: plain, batching: continuous, max_num_seqs: 4}
  - label: self
    batching: continuous
    max_num_seqs: 4
    speculative: {method: self, num_layers: 2, num_speculative_tokens: 3, adaptive: false}
workload:
  rates: [50]
  n_requests: 2
  prompt_tokens: {dist: fixed, value: 8}
  output_tokens: {dist: fixed, value: 8}
)");
  const CliResult r = run_servelab({"run", tmp.file("self.yaml"), "--out", tmp.file("out"), "-q"}, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  const json s = json::parse(read_text(tmp.file("out/summary.json")));
  ASSERT_EQ(s.at("runs").size(), 2u);
  const json& sd = s.at("runs")[1].at("metrics").at("spec_decode");
  const int64_t drafts = sd.at("num_drafts"), accepted = sd.at("num_accepted_tokens");
  EXPECT_GT(drafts, 0);
  const json& per_pos = sd.at("num_accepted_tokens_per_pos");
  ASSERT_TRUE(per_pos.is_array());
  int64_t sum = 0;
  for (const auto& v : per_pos) sum += v.get<int64_t>();
  EXPECT_EQ(sum, accepted);
  EXPECT_EQ(s.at("runs")[0].at("metrics").at("n_output_tokens"), s.at("runs")[1].at("metrics").at("n_output_tokens"));
}

}  // namespace spec_decode_cli_test
}  // namespace servelab::cli_test
