// A strategy's `speculative:` block end to end: `servelab run` verifies n-gram drafts each step
// and reports vLLM's spec_decode counters per run in summary.json (and per step in steps.jsonl).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace spec_decode_cli_test {  // named, not anonymous: a unity batch shares one translation unit

using nlohmann::json;

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
    speculative: {method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 1, prompt_lookup_max: 2}
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

}  // namespace spec_decode_cli_test
}  // namespace servelab::cli_test
