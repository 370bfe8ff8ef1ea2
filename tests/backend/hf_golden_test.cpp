// Golden check against Hugging Face transformers: logits that transformers 5.17 computed (fp32, on
// the GPU machine, 2026-11-22) for tokens 1..16 on checkpoints that `servelab model synth` wrote
// with the seeds below. Our weights are regenerated from the same config and seed, so both the plain
// reference and the CPU backend must land on transformers' numbers.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend/step_input.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/reference.h"
#include "engine/model/hf_config.h"
#include "engine/model/weights.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

struct Golden {
  std::vector<TokenId> tokens;
  std::vector<std::pair<int, std::vector<float>>> logits_at;  // (position, logits)
};

Golden read_golden(const std::string& name) {
  std::ifstream in(std::string(SERVELAB_SOURCE_DIR) + "/tests/data/hf_golden/logits_" + name + ".json");
  const auto j = nlohmann::json::parse(in);
  Golden g;
  g.tokens = j.at("tokens").get<std::vector<TokenId>>();
  for (const auto& [pos, v] : j.at("logits_at").items()) g.logits_at.emplace_back(std::stoi(pos), v.get<std::vector<float>>());
  return g;
}

struct Checkpoint {
  const char* name;
  uint64_t seed;  // the seed `servelab model synth` was given for the checkpoint transformers read
};

class HfGolden : public ::testing::TestWithParam<Checkpoint> {};

TEST_P(HfGolden, ReferenceAndCpuBackendMatchTransformers) {
  const std::string name = GetParam().name;
  const ModelConfig cfg =
      read_hf_config(std::string(SERVELAB_SOURCE_DIR) + "/tests/data/hf_golden/" + name + "_config.json");
  auto weights = std::make_shared<const ModelWeights>(ModelWeights::random(cfg, GetParam().seed));
  const Golden g = read_golden(name);

  const std::vector<float> ref = reference_logits_all(*weights, g.tokens);
  CpuBackend backend(weights, CpuBackendOptions{.n_threads = 2});
  backend.init_kv(64);
  testing::ScrambledKv kv(64, 7);
  Sequence seq;
  seq.id = 1;
  seq.tokens = g.tokens;
  seq.n_prompt = static_cast<int>(g.tokens.size());
  kv.assign(seq.id, seq.n_prompt);
  const size_t vocab = cfg.vocab_size;
  for (const auto& [pos, hf] : g.logits_at) {
    ASSERT_EQ(hf.size(), vocab);
    const std::span<const float> r(ref.data() + pos * vocab, vocab);
    EXPECT_LT(testing::rel_error(r, hf), 1e-4) << name << " reference, position " << pos;
    // The CPU backend: prefill positions [0, pos] and sample at pos.
    Sequence s = seq;
    s.tokens.resize(pos + 1);
    s.n_prompt = pos + 1;
    Batch batch;
    batch.entries = {{&s, pos + 1, true}};
    const std::span<const float> out = backend.logits(make_step(backend, batch, kv));
    EXPECT_LT(testing::rel_error(out, hf), 1e-4) << name << " cpu backend, position " << pos;
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, HfGolden, ::testing::Values(Checkpoint{"tiny", 1}, Checkpoint{"mqwen", 2}));

}  // namespace
}  // namespace servelab
