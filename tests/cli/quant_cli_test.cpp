// Quantization from the command line: strategies in different weight and KV formats side by side
// on the sim, and `servelab quant-check`'s accuracy figures.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"

namespace servelab::cli_test {
namespace quant_cli_test {  // named, not anonymous: a unity batch shares one translation unit

using nlohmann::json;

TEST(QuantCli, FormatsSideBySideOnTheSimDecodeFasterWithFewerBytes) {
  if (!fs::exists(servelab_exe())) GTEST_SKIP() << servelab_exe() << " not built";
  TempDir tmp;
  write_text(tmp.file("quant.yaml"), R"(name: quant
seed: 3
model: {preset: llama2-7b}
backend: {kind: sim, sim_device: h100}
engine: {kv_cache_mb: 8192, max_model_len: 1024}
strategies:
  - {label: bf16, batching: continuous, max_num_seqs: 8}
  - {label: fp8, batching: continuous, max_num_seqs: 8, quantization: fp8}
  - {label: int4, batching: continuous, max_num_seqs: 8, quantization: int4_awq, kv_cache_dtype: fp8}
workload:
  rates: [2]
  n_requests: 6
  prompt_tokens: {dist: fixed, value: 64}
  output_tokens: {dist: fixed, value: 32}
)");
  const CliResult r = run_servelab({"run", tmp.file("quant.yaml"), "--out", tmp.file("out"), "-q"}, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  const json s = json::parse(read_text(tmp.file("out/summary.json")));
  ASSERT_EQ(s.at("runs").size(), 3u);
  auto tpot = [&](int i) { return s.at("runs")[i].at("metrics").at("tpot_ms").at("p50").get<double>(); };
  // Decode streams the weights: 2 bytes, ~1 byte, ~0.52 bytes a weight (plus the step's fixed cost).
  EXPECT_LT(tpot(1), 0.7 * tpot(0));
  EXPECT_LT(tpot(2), 0.8 * tpot(1));
  // --kv-cache-dtype fp8 on a tensor-parallel cuda scenario is refused with the reason (one GPU runs it).
  write_text(tmp.file("cuda.yaml"),
             "backend: {kind: cuda, tensor_parallel: 2}\nstrategies: [{batching: continuous}]\nworkload: {rates: [1]}\n");
  const CliResult c = run_servelab({"run", tmp.file("cuda.yaml"), "--kv-cache-dtype", "fp8", "-q"}, tmp);
  EXPECT_EQ(c.code, 2) << c.output;
  EXPECT_NE(c.output.find("tensor_parallel 1 only"), std::string::npos) << c.output;
}

// A cpu run of strategies in several formats measures each format's accuracy first: report.md's
// storage-formats table and summary.json's "accuracy" carry it, and `servelab report` re-renders
// summary.json byte for byte from runs.json.
TEST(QuantCli, CpuRunReportsEachFormatsAccuracy) {
  if (!fs::exists(servelab_exe())) GTEST_SKIP() << servelab_exe() << " not built";
  TempDir tmp;
  write_text(tmp.file("q.yaml"), R"(name: q
seed: 3
model: {preset: tiny}
backend: {kind: cpu, threads: 2}
engine: {kv_cache_mb: 8, max_model_len: 256}
strategies:
  - {label: bf16, batching: continuous}
  - {label: int4, batching: continuous, quantization: int4_awq, kv_cache_dtype: fp8}
workload:
  rates: [50]
  n_requests: 4
  prompt_tokens: {dist: fixed, value: 16}
  output_tokens: {dist: fixed, value: 4}
report: {accuracy_positions: 64}
gates:
  - {metric: accuracy_mean_kl, max: 10, strategy: int4}
  - {metric: roofline_decode_efficiency, min: 0.000001}
)");
  const CliResult r = run_servelab({"run", tmp.file("q.yaml"), "--out", tmp.file("out"), "--no-plots"}, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("gates: 2 passed, 0 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("accuracy: int4_awq"), std::string::npos) << r.output;
  const std::string summary = read_text(tmp.file("out/summary.json"));
  const json s = json::parse(summary);
  EXPECT_FALSE(s.at("runs")[0].contains("accuracy"));
  const json& a = s.at("runs")[1].at("accuracy");
  EXPECT_EQ(a.at("positions"), 64);
  EXPECT_EQ(a.at("kv_cache_dtype"), "fp8");
  EXPECT_GT(a.at("mean_kl").get<double>(), 0.0);
  EXPECT_LE(a.at("top1_agreement").get<double>(), 1.0);
  EXPECT_NE(read_text(tmp.file("out/report.md")).find("## Storage formats"), std::string::npos);
  const CliResult again = run_servelab({"report", tmp.file("out"), "--no-plots"}, tmp);
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_EQ(read_text(tmp.file("out/summary.json")), summary);
  // A gate on an accuracy the run cannot have (the model's own formats) fails: nothing measured is not a pass.
  write_text(tmp.file("g.yaml"), read_text(tmp.file("q.yaml")) + "  - {metric: accuracy_top1_agreement, min: 0.5, strategy: bf16}\n");
  const CliResult g = run_servelab({"run", tmp.file("g.yaml"), "--out", tmp.file("out2"), "--no-plots", "-q"}, tmp);
  EXPECT_EQ(g.code, 1) << g.output;
}

TEST(QuantCli, QuantCheckReportsEveryFormat) {
  if (!fs::exists(servelab_exe())) GTEST_SKIP() << servelab_exe() << " not built";
  TempDir tmp;
  const CliResult r = run_servelab({"quant-check", "--positions", "24", "--sequences", "4", "--threads", "2", "--json",
                                    tmp.file("q.json")},
                                   tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = json::parse(read_text(tmp.file("q.json")));
  EXPECT_EQ(j.at("positions"), 24);
  ASSERT_EQ(j.at("formats").size(), 8u);
  double fp8_err = 0, int4_err = 0;
  for (const json& f : j.at("formats")) {
    EXPECT_GT(f.at("top1_agreement").get<double>(), 0.1) << f.dump();  // far above chance (1/2048); random weights are flat
    EXPECT_LE(f.at("top1_agreement").get<double>(), 1.0);
    EXPECT_GT(f.at("mean_kl").get<double>(), 0.0) << f.dump();
    if (f.at("label") == "fp8-channel-token") fp8_err = f.at("rel_logit_error");
    if (f.at("label") == "int4_awq-g64") int4_err = f.at("rel_logit_error");
  }
  EXPECT_GT(int4_err, fp8_err);
  EXPECT_GT(fp8_err, 0.0);
}

TEST(QuantCli, QuantCheckMassiveActivationsSeparateTheScaleLayouts) {
  if (!fs::exists(servelab_exe())) GTEST_SKIP() << servelab_exe() << " not built";
  TempDir tmp;
  const CliResult r = run_servelab({"quant-check", "--positions", "32", "--sequences", "4", "--threads", "2",
                                    "--residual-scale", "0.05", "--massive-tokens", "4", "--massive-scale", "1e6",
                                    "--massive-rate", "0.2", "--json", tmp.file("q.json")},
                                   tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("4 massive tokens"), std::string::npos) << r.output;
  const json j = json::parse(read_text(tmp.file("q.json")));
  EXPECT_EQ(j.at("massive_tokens").size(), 4u);
  EXPECT_EQ(j.at("residual_scale"), 0.05f);
  double tensor_kl = 0, token_kl = 0;
  for (const json& f : j.at("formats")) {
    if (f.at("label") == "fp8-tensor") tensor_kl = f.at("mean_kl");
    if (f.at("label") == "fp8-channel-token") token_kl = f.at("mean_kl");
    EXPECT_LE(f.at("top1_agreement_others").get<double>(), 1.0);
  }
  EXPECT_GT(tensor_kl, 3.0 * token_kl);  // one scale for the step: a massive row sets it
  const CliResult bad = run_servelab({"quant-check", "--positions", "8", "--massive-tokens", "2", "--massive-rate", "2"}, tmp);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("massive rate must be in [0, 1]"), std::string::npos) << bad.output;
  // --backend: cpu or cuda; the features synthesized into host weights are the cpu's.
  const CliResult sim = run_servelab({"quant-check", "--backend", "sim"}, tmp);
  EXPECT_EQ(sim.code, 2) << sim.output;
  EXPECT_NE(sim.output.find("--backend must be cpu or cuda"), std::string::npos) << sim.output;
  const CliResult outl = run_servelab({"quant-check", "--backend", "cuda", "--outlier-channels", "2"}, tmp);
  EXPECT_EQ(outl.code, 2) << outl.output;
  EXPECT_NE(outl.output.find("use --backend cpu"), std::string::npos) << outl.output;
}

}  // namespace quant_cli_test
}  // namespace servelab::cli_test
