// The cuda backend against Hugging Face transformers on the same checkpoint folder: logits of a
// prefill's last row and of one decode step within bf16 tolerance of the float32 transformers
// model (scripts/gpu-hf-check.py writes the reference; SERVELAB_HF_REFERENCE names its JSON,
// colon-separated for several). Skipped without a device or without a reference.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend/step_input.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/kv/kv_manager.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

std::vector<std::string> reference_files() {
  std::vector<std::string> out;
  const char* env = std::getenv("SERVELAB_HF_REFERENCE");
  if (!env) return out;
  std::stringstream ss(env);
  for (std::string item; std::getline(ss, item, ':');)
    if (!item.empty()) out.push_back(item);
  return out;
}

TEST(CudaBackendGpuHf, LogitsMatchTransformers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::string> files = reference_files();
  if (files.empty()) GTEST_SKIP() << "SERVELAB_HF_REFERENCE not set (scripts/gpu-hf-check.py writes it)";
  for (const std::string& file : files) {
    std::ifstream in(file);
    ASSERT_TRUE(in) << file;
    const nlohmann::json ref = nlohmann::json::parse(in);
    const std::string dir = ref["model_dir"];
    const std::vector<TokenId> tokens = ref["tokens"];
    const int n = ref["n_prefill"];
    const std::vector<std::vector<float>> rows = ref["logits"];
    auto gpu = CudaBackend::load(dir);
    gpu->init_kv(4096);
    KvConfig kc;
    kc.max_model_len = 512;
    auto kv = make_kv_manager(kc, 4096);
    Sequence s = testing::make_sequence(1, std::vector<TokenId>(tokens.begin(), tokens.begin() + n));
    s.sampling.max_tokens = 8;
    kv->allocate(s, n);
    Batch prefill;
    prefill.entries = {{&s, n, true}};
    const std::vector<float> a = gpu->logits(make_step(*gpu, prefill, *kv));
    const double e0 = testing::rel_error(a, rows[0]);
    EXPECT_LT(e0, 3e-2) << file << ": prefill";
    s.n_computed = n;
    s.tokens.push_back(tokens[n]);
    kv->grow(s, n + 1);
    Batch decode;
    decode.entries = {{&s, 1, true}};
    const std::vector<float> b = gpu->logits(make_step(*gpu, decode, *kv));
    const double e1 = testing::rel_error(b, rows[1]);
    EXPECT_LT(e1, 3e-2) << file << ": decode";
    std::printf("%s (%s): rel error vs transformers fp32: prefill %.2e, decode %.2e\n", dir.c_str(),
                std::string(ref["architecture"]).c_str(), e0, e1);
  }
}

}  // namespace
}  // namespace servelab
