// Token masks filled while the forward runs (Step::fill_masks) on the cuda backend: the same
// tokens as masks filled before the step when both run eagerly, every draw allowed with CUDA
// graphs on (the forward a graph, the masks and draws after it), and a filler that throws is the
// step's error, after which the backend still runs. Skipped without a device.
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "tests/cuda_backend_gpu/gpu_test_model.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace late_masks_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

ModelConfig model() { return testing::gpu_test_model("gpu-late-masks", 512); }

/// Allows tokens t with t % modulus == residue (after any draft: the mask does not move).
class ModuloMask final : public TokenConstraint {
 public:
  ModuloMask(int vocab, int modulus, int residue) : vocab_(vocab), modulus_(modulus), residue_(residue) {}
  void fill_mask(std::span<const TokenId>, uint32_t* words) override {
    if (fail) throw std::runtime_error("mask failed on purpose");
    for (int w = 0; w < (vocab_ + 31) / 32; ++w) words[w] = 0;
    for (int t = residue_; t < vocab_; t += modulus_) words[t / 32] |= 1u << (t % 32);
  }
  void accept(TokenId) override {}
  bool fail = false;

 private:
  int vocab_, modulus_, residue_;
};

struct Outcome {
  std::map<uint64_t, std::vector<TokenId>> outputs;
  int masked_steps = 0;
};

Outcome run(bool overlap, bool graphs, float temperature) {
  CudaBackendOptions o;
  o.cuda_graphs = graphs;
  EngineConfig c = paged_config(continuous_sched(16, 256, true), 8192ll * 1024);
  c.kv.max_model_len = 256;
  c.structured_output.overlap_masks = overlap;
  Engine engine(c, CudaBackend::random(model(), 5, o));
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) {
    Request r = make_request(i, 9 + 5 * i, 24);
    r.sampling.temperature = temperature;
    if (i % 3 != 2) r.constraint = std::make_shared<ModuloMask>(model().vocab_size, 3 + i % 4, i % 3);
    reqs.push_back(r);
  }
  const RunResult r = run_virtual(engine, at_zero(reqs));
  Outcome out;
  for (const StepOutcome& s : r.steps) out.masked_steps += s.n_masks > 0;
  for (int i = 0; i < 12; ++i) {
    const std::vector<TokenId>& toks = r.at(uint64_t(i)).outputs.at(0);
    EXPECT_EQ(int(toks.size()), 24);
    if (i % 3 != 2)
      for (TokenId t : toks) EXPECT_EQ(t % (3 + i % 4), i % 3) << "request " << i << " drew a masked-out token";
    out.outputs[uint64_t(i)] = toks;
  }
  return out;
}

TEST(CudaLateMasks, SameTokensAsMasksBeforeTheStepWhenBothRunEagerly) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const float temperature : {0.0f, 0.9f}) {
    const Outcome before = run(false, false, temperature);
    const Outcome late = run(true, false, temperature);
    EXPECT_EQ(late.outputs, before.outputs) << "temperature " << temperature;
    EXPECT_GT(late.masked_steps, 10);
  }
}

TEST(CudaLateMasks, EveryDrawIsAllowedWithGraphs) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Outcome late = run(true, true, 0.9f);  // run() checks every token against its mask
  EXPECT_GT(late.masked_steps, 10);
}

TEST(CudaLateMasks, AFillerThatThrowsIsTheStepsErrorAndTheBackendRunsOn) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  EngineConfig c = paged_config(continuous_sched(16, 256, true), 8192ll * 1024);
  c.kv.max_model_len = 256;
  Engine engine(c, CudaBackend::random(model(), 5, {}));
  auto mask = std::make_shared<ModuloMask>(model().vocab_size, 2, 0);
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) {
    reqs.push_back(make_request(i, 8, 40));
    reqs.back().constraint = mask;
  }
  for (const Request& r : reqs) ASSERT_FALSE(engine.add(r, 0.0).has_value());
  for (int s = 0; s < 6; ++s) engine.step(s);  // prefill, then graph decode steps
  mask->fail = true;
  EXPECT_THROW(engine.step(6), std::runtime_error);
  // The backend itself is intact: a fresh step of the same shape (masks filled again) runs.
  mask->fail = false;
  for (int s = 7; s < 10; ++s) EXPECT_NO_THROW(engine.step(s));
}

}  // namespace late_masks_gpu_test
}  // namespace servelab
