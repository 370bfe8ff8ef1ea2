// The sim backend: K/V sizing, roofline figures against hand-computed ones, the fitted linear
// model, profile files, and its deterministic tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "engine/backend/make_backend.h"
#include "engine/backend/sim_backend.h"
#include "engine/kv/kv_manager.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace {

using namespace enginetest;

TEST(SimBackend, KvBytesPerSlotFollowTheModel) {
  SimBackend b(preset("llama2-7b"), SimCostModel::roofline(SimDevice::preset("h100")));
  EXPECT_EQ(b.kv_bytes_per_slot(), 512 * 1024);  // 2 × 32 layers × 4096 × bf16
  SimBackend g(preset("llama3-8b"), SimCostModel::roofline(SimDevice::preset("h100")));
  EXPECT_EQ(g.kv_bytes_per_slot(), 128 * 1024);  // GQA: 8 KV heads
  SimBackend c(preset("llama3-8b"), SimCostModel::roofline(SimDevice::preset("cpu-2core")));
  EXPECT_EQ(c.kv_bytes_per_slot(), 256 * 1024);  // fp32 K/V
}

TEST(SimCostModel, DecodeIsMemoryBoundAndLongPrefillComputeBound) {
  const ModelConfig m = preset("llama2-7b");
  const SimDevice h100 = SimDevice::preset("h100");
  const SimCostModel cost = SimCostModel::roofline(h100);
  // Batch-1 decode at context 512: ~13.5 GB of bf16 weights over 3.35 TB/s, plus a little KV.
  StepShape decode;
  decode.n_tokens = 1;
  decode.n_sampled = 1;
  decode.sum_context = 512;
  decode.attention_pairs = 512;
  const double weights_s = 2.0 * m.n_params() / h100.mem_bw_bytes_s;
  const double t = cost.step_seconds(m, decode) - h100.step_overhead_s;
  EXPECT_GT(t, weights_s * 0.95);
  EXPECT_LT(t, weights_s * 1.1);
  // Prefill of 4096 tokens: ~2·P FLOPs a token dominate the same weight read.
  StepShape prefill;
  prefill.n_tokens = 4096;
  prefill.n_sampled = 1;
  prefill.sum_context = 4096;
  prefill.attention_pairs = 4096.0 * 4097.0 / 2.0;
  const double flops_s = 2.0 * 6.5e9 * 4096 / h100.peak_flops;
  const double tp = cost.step_seconds(m, prefill);
  EXPECT_GT(tp, flops_s);
  EXPECT_LT(tp, 2.0 * flops_s);
  // H200 has more bandwidth: decode gets faster, the compute-bound prefill barely moves.
  const SimCostModel h200 = SimCostModel::roofline(SimDevice::preset("h200"));
  EXPECT_LT(h200.step_seconds(m, decode), 0.8 * cost.step_seconds(m, decode));
  EXPECT_NEAR(h200.step_seconds(m, prefill), tp, 0.02 * tp);
}

TEST(SimCostModel, PaddingCostsCompute) {
  const ModelConfig m = preset("llama2-7b");
  const SimCostModel cost = SimCostModel::roofline(SimDevice::preset("h100"));
  StepShape s;
  s.n_tokens = 2048;
  s.n_sampled = 8;
  s.sum_context = 2048;
  s.attention_pairs = 2048 * 256;
  StepShape padded = s;
  padded.n_padding_tokens = 2048;
  EXPECT_GT(cost.step_seconds(m, padded), 1.8 * cost.step_seconds(m, s) - 1e-3);
}

TEST(LinearStepModel, FitRecoversTheCoefficients) {
  std::vector<StepSample> samples;
  for (int n : {1, 4, 16, 64, 256})
    for (int c : {0, 128, 1024, 8192}) samples.push_back({n, n + c, 0.002 + 1e-5 * n + 3e-7 * (n + c)});
  const LinearStepModel m = LinearStepModel::fit(samples);
  EXPECT_NEAR(m.a_s, 0.002, 1e-9);
  EXPECT_NEAR(m.b_s_per_token, 1e-5, 1e-11);
  EXPECT_NEAR(m.c_s_per_context, 3e-7, 1e-12);
  EXPECT_NEAR(m.predict(32, 4000), 0.002 + 1e-5 * 32 + 3e-7 * 4000, 1e-9);
}

TEST(LinearStepModel, FewerCoefficientsWhenTheSamplesCannotTellThemApart) {
  // Context always proportional to tokens: only a + b·n is determined.
  std::vector<StepSample> samples;
  for (int n : {1, 2, 4, 8}) samples.push_back({n, 100 * n, 0.001 + 0.0005 * n});
  const LinearStepModel m = LinearStepModel::fit(samples);
  EXPECT_NEAR(m.predict(16, 1600), 0.001 + 0.0005 * 16, 1e-9);
  EXPECT_THROW(LinearStepModel::fit({}), std::invalid_argument);
}

class TempFile {
 public:
  explicit TempFile(const std::string& text) : path_(testing::TempDir() + "servelab_profile_" +
                                                     std::to_string(reinterpret_cast<uintptr_t>(this)) + ".json") {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(SimCostModel, FromProfileJson) {
  TempFile f(R"({"kv_dtype_bytes": 4, "samples": [
      {"n_tokens": 1, "sum_context": 100, "step_s": 0.0011},
      {"n_tokens": 8, "sum_context": 800, "step_s": 0.0018},
      {"n_tokens": 8, "sum_context": 8000, "step_s": 0.0025},
      {"n_tokens": 64, "sum_context": 64, "step_s": 0.00739}]})");
  const SimCostModel m = SimCostModel::from_profile_json(f.path());
  EXPECT_EQ(m.kind, SimCostModel::Kind::linear);
  EXPECT_EQ(m.device.kv_dtype_bytes, 4);
  EXPECT_EQ(m.source, f.path());
  StepShape s;
  s.n_tokens = 8;
  s.sum_context = 800;
  EXPECT_NEAR(m.step_seconds(micro_model(), s), 0.0018, 1e-4);
}

TEST(SimCostModel, BadProfilesNameTheFileAndSample) {
  auto error_of = [](const std::string& path) -> std::string {
    try {
      SimCostModel::from_profile_json(path);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("/nonexistent/profile.json").find("/nonexistent/profile.json"), std::string::npos);
  TempFile not_json("{oops");
  EXPECT_NE(error_of(not_json.path()).find("not valid JSON"), std::string::npos);
  TempFile missing(R"({"samples": [{"n_tokens": 1, "sum_context": 1, "step_s": 0.1}, {"n_tokens": 2}]})");
  const std::string e = error_of(missing.path());
  EXPECT_NE(e.find("samples[1]"), std::string::npos) << e;
  EXPECT_NE(e.find("sum_context"), std::string::npos) << e;
}

TEST(SimBackend, TokensArePureFunctionsOfSeedSampleAndPosition) {
  const ModelConfig m = micro_model();
  Engine a(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend());
  Engine b(paged_config(static_sched(3, 0.0), 1 << 20), sim_backend());
  std::vector<Request> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back(make_request(i, 5 + 3 * i, 20));
  RunResult ra = run_virtual(a, at_zero(reqs)), rb = run_virtual(b, at_zero(reqs));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ra.at(i).outputs, rb.at(i).outputs);
    for (TokenId t : ra.at(i).outputs[0]) {
      EXPECT_GE(t, 2);
      EXPECT_LT(t, m.vocab_size);
    }
  }
  EXPECT_NE(ra.at(0).outputs, ra.at(1).outputs);  // different seeds
}

TEST(SimBackend, ForwardRejectsAnEntryWithoutSlots) {
  SimBackend b(micro_model(), SimCostModel::roofline(SimDevice::preset("h100")));
  b.init_kv(64);
  KvConfig kc;
  auto kv = make_kv_manager(kc, 64);
  Sequence s;
  s.id = 1;
  s.tokens = prompt_tokens(20, 1);
  s.n_prompt = 20;
  Batch batch;
  batch.entries.push_back({&s, 20, true});
  EXPECT_THROW(b.forward(batch, *kv), std::invalid_argument);
  kv->allocate(s, 20);
  const ForwardResult r = b.forward(batch, *kv);
  ASSERT_EQ(r.sampled.size(), 1u);
  ASSERT_TRUE(r.predicted_s.has_value());
  EXPECT_GT(*r.predicted_s, 0.0);
}

TEST(SimDevice, PresetsAndValidation) {
  for (const auto& name : SimDevice::preset_names()) EXPECT_NO_THROW(SimDevice::preset(name).validate());
  try {
    SimDevice::preset("a100");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("h200"), std::string::npos);
  }
  SimDevice d = SimDevice::preset("h100");
  d.mem_bw_bytes_s = 0;
  EXPECT_THROW(d.validate(), std::invalid_argument);
}

TEST(MakeBackend, BuildsSimAndCpuFromAPreset) {
  BackendSpec spec;
  spec.kind = BackendKind::sim;
  spec.model = "llama3-8b";
  spec.sim_device = SimDevice::preset("h200");
  auto sim = make_backend(spec);
  EXPECT_EQ(sim->name(), "sim");
  EXPECT_EQ(sim->config().name, "llama3-8b");
  spec.kind = BackendKind::cpu;
  spec.model = "tiny";
  spec.threads = 1;
  auto cpu = make_backend(spec);
  EXPECT_EQ(cpu->name(), "cpu");
  EXPECT_EQ(cpu->config().hidden_size, 256);
  spec.model = "no-such-model";
  EXPECT_THROW(make_backend(spec), std::invalid_argument);
  EXPECT_EQ(parse_backend_kind("sim"), BackendKind::sim);
  EXPECT_THROW(parse_backend_kind("gpu"), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
