// Speculative decoding on the cuda backend, batch-invariant (every row's result independent of
// its batch, so a verification row computes what a decode row would): the drafts of `self` (the
// preset's first layers, built on the GPU by make_proposer) and of `draft_model` leave the greedy
// output byte-identical to the run without drafts; sampled drafts travel with their q and the
// target verifies them by rejection sampling (distributed as the run without drafts: the sampler's
// tests, verify_draft_gpu_test.cpp); a target whose later layers add nothing
// (model.residual_scale 0) has every draft accepted, greedy and sampled, and then gives the
// tokens of the run without drafts at any temperature. Skipped without a device.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/make_backend.h"
#include "engine/spec/model_proposer.h"
#include "engine/spec/spec_config.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace spec_gpu_test {

using namespace enginetest;

BackendSpec tiny_spec(float scale) {
  BackendSpec s;
  s.kind = BackendKind::cuda;
  s.model = "tiny";
  s.seed = 3;
  s.batch_invariant = true;
  s.residual_scale = ResidualScale{2, scale};  // layers 2 and 3 of 4 add scale x their branches
  return s;
}

struct Outcome {
  std::map<uint64_t, std::vector<TokenId>> tokens;
  int drafted = 0, accepted = 0;
};

/// Gives `e` (an engine of `spec`: 6 sequences, 96 rows, max_model_len tokens) the proposer of `sc`.
void speculate(Engine& e, const BackendSpec& spec, const SpeculativeConfig& sc, int max_model_len = 256) {
  ProposerTarget t;
  t.backend = spec;
  t.vocab_size = e.backend().config().vocab_size;
  t.max_model_len = max_model_len;
  t.max_num_seqs = 6;
  t.max_num_batched_tokens = 96;
  t.seed = spec.seed;
  t.device_draft_kv_bytes = 16ll << 20;
  e.set_proposer(make_proposer(sc, t), sc.num_speculative_tokens);
}

Outcome run(const BackendSpec& spec, float temperature, const SpeculativeConfig* sc) {
  EngineConfig ec = paged_config(continuous_sched(6, 96, true), 64ll << 20);
  ec.kv.max_model_len = 256;
  Engine e(ec, make_backend(spec));
  if (sc) {
    speculate(e, spec, *sc);
  }
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r = make_request(i, 9 + 13 * i, 24);
    r.sampling.temperature = temperature;
    r.sampling.seed = 40 + uint64_t(i);
    reqs.push_back(r);
  }
  const RunResult r = run_virtual(e, at_zero(reqs));
  Outcome o;
  for (const auto& [id, f] : r.finished) {
    EXPECT_TRUE(f.error.empty()) << "request " << id << ": " << f.error;
    o.tokens[id] = f.outputs.at(0);
  }
  for (const StepOutcome& s : r.steps) {
    o.drafted += s.spec_draft_tokens;
    o.accepted += s.spec_accepted_tokens;
  }
  if (sc) {
    const auto& mp = dynamic_cast<const ModelProposer&>(*e.proposer());
    EXPECT_EQ(mp.backend().name(), "cuda");
    EXPECT_EQ(mp.n_sequences(), 0);
  }
  return o;
}

TEST(SpecGpu, DraftsOnTheGpuLeaveTheOutputUnchanged) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const BackendSpec spec = tiny_spec(0.3f);
  SpeculativeConfig self;
  self.method = SpecMethod::self;
  self.num_layers = 2;
  self.num_speculative_tokens = 3;
  self.adaptive = false;
  SpeculativeConfig draft = self;
  draft.method = SpecMethod::draft_model;
  draft.num_layers = 0;
  draft.model = "tiny";
  for (const float temperature : {0.0f, 0.8f}) {
    const Outcome plain = run(spec, temperature, nullptr);
    ASSERT_EQ(plain.tokens.size(), 6u);
    for (const SpeculativeConfig* sc : {&self, &draft}) {
      const Outcome o = run(spec, temperature, sc);
      if (temperature == 0.0f) {
        EXPECT_EQ(o.tokens, plain.tokens) << to_string(sc->method);
      } else {  // rejection sampling against q: the same distribution, not the same tokens
        ASSERT_EQ(o.tokens.size(), plain.tokens.size());
        for (const auto& [id, t] : o.tokens) EXPECT_EQ(t.size(), plain.tokens.at(id).size()) << "request " << id;
        EXPECT_LT(o.accepted, o.drafted) << to_string(sc->method) << ": a draft of another model is not always right";
      }
      EXPECT_GT(o.drafted, 0) << to_string(sc->method);
      if (sc == &self) {
        EXPECT_GT(o.accepted, 0) << "temperature " << temperature;
      }
    }
  }
}

TEST(SpecGpu, AnExactSelfDraftIsAlwaysAccepted) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  SpeculativeConfig self;
  self.method = SpecMethod::self;
  self.num_layers = 2;
  self.num_speculative_tokens = 4;
  self.adaptive = false;
  for (const float temperature : {0.0f, 0.8f}) {
    // q = p exactly (batch-invariant, the later layers add 0), and the draft draws with the
    // target's key: every draft stands (u q(x) < p(x)), and the tokens are the plain run's.
    const Outcome o = run(tiny_spec(0.0f), temperature, &self);
    ASSERT_GT(o.drafted, 0);
    EXPECT_EQ(o.accepted, o.drafted) << "temperature " << temperature;
    EXPECT_EQ(o.tokens, run(tiny_spec(0.0f), temperature, nullptr).tokens) << "temperature " << temperature;
  }
}

void verification_steps_replay_the_decode_graphs(bool rows_kernel, int n_requests) {
  // With CUDA graphs (not batch-invariant), a verification step runs in its one-row form through
  // the decode graphs (verify_rows.h): with the multi-row decode attention (rows_kernel, up to
  // 512 rows) or as one-row decode sequences (up to 16 rows). An exact self draft (scale 0) is then still
  // accepted almost always: only the GEMMs' row counts differ between the draft's steps and the
  // target's (rounding), while a wrong context or block-table row per verification row would
  // make the target disagree with most drafts.
  BackendSpec spec = tiny_spec(0.0f);
  spec.batch_invariant = false;
  SpeculativeConfig self;
  self.method = SpecMethod::self;
  self.num_layers = 2;
  self.num_speculative_tokens = 4;
  self.adaptive = false;
  EngineConfig ec = paged_config(continuous_sched(6, 96, true), 64ll << 20);
  ec.kv.max_model_len = 256;
  CudaBackendOptions o;
  o.residual_scale = spec.residual_scale;
  o.verify_rows_kernel = rows_kernel;
  o.verify_rows_kernel_gqa = rows_kernel;  // tiny has GQA 4: the rows kernel only when asked
  Engine e(ec, CudaBackend::random(preset(spec.model), spec.seed, o));
  speculate(e, spec, self);
  std::vector<Request> reqs;
  for (int i = 0; i < n_requests; ++i) reqs.push_back(make_request(i, 9 + 13 * i, 32));
  const RunResult r = run_virtual(e, at_zero(reqs));
  int drafted = 0, accepted = 0;
  for (const StepOutcome& s : r.steps) {
    drafted += s.spec_draft_tokens;
    accepted += s.spec_accepted_tokens;
  }
  for (const auto& [id, f] : r.finished) {
    EXPECT_TRUE(f.error.empty()) << f.error;
    EXPECT_EQ(f.outputs.at(0).size(), 32u) << "request " << id;
  }
  const auto& cuda = dynamic_cast<const CudaBackend&>(e.backend());
  EXPECT_GT(cuda.verification_steps_graphed(), 0);
  EXPECT_GT(cuda.graph_captures(), 0);
  ASSERT_GT(drafted, 0);
  EXPECT_GE(double(accepted), 0.9 * drafted) << accepted << " of " << drafted << " drafts accepted";
}


TEST(SpecGpu, VerificationStepsReplayTheDecodeGraphs) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const bool rows_kernel : {true, false}) {
    SCOPED_TRACE(rows_kernel ? "multi-row decode attention" : "one-row sequences");
    verification_steps_replay_the_decode_graphs(rows_kernel, 3);  // <= 15 verification rows
  }
}

TEST(SpecGpu, TheRowsKernelServesLargeVerificationSteps) {
  // 6 sequences of 5 rows (30 rows, past the one-row transform's 16): graphed with the
  // multi-row kernel, still accepted as often.
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  verification_steps_replay_the_decode_graphs(true, 6);
}

TEST(SpecGpu, AWarmedDraftCapturesNoGraphWhileServing) {
  // make_proposer warms a device draft up (ModelProposer::warm_up): every decode graph of its
  // batch and context buckets, greedy and with q, is captured before serving, and its catch-ups
  // never outgrow the step buffers the graphs baked in. A run with prompts of 9-74 and 300 tokens
  // (contexts in the 256 and 512 buckets), greedy and sampled, then captures none.
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  BackendSpec spec = tiny_spec(0.3f);
  spec.batch_invariant = false;
  SpeculativeConfig self;
  self.method = SpecMethod::self;
  self.num_layers = 2;
  self.num_speculative_tokens = 3;
  EngineConfig ec = paged_config(continuous_sched(6, 96, true), 64ll << 20);
  ec.kv.max_model_len = 600;
  CudaBackendOptions o;
  o.residual_scale = spec.residual_scale;
  Engine e(ec, CudaBackend::random(preset(spec.model), spec.seed, o));
  speculate(e, spec, self, 600);
  const auto& mp = dynamic_cast<const ModelProposer&>(*e.proposer());
  const auto& draft = dynamic_cast<const CudaBackend&>(mp.backend());
  const WarmShapes shapes = draft.warm_shapes(mp.limits());
  EXPECT_EQ(shapes.decode_batches, (std::vector<int>{1, 2, 4, 6}));
  EXPECT_EQ(shapes.decode_contexts, (std::vector<int>{256, 512, 600}));
  const int64_t warmed = draft.graph_captures();
  EXPECT_EQ(warmed, int64_t(2 * shapes.decode_batches.size() * shapes.decode_contexts.size()))
      << "each (batch, context) bucket once greedy and once with q";
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r = make_request(i, i == 5 ? 300 : 9 + 13 * i, 40);
    r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    r.sampling.seed = 90 + uint64_t(i);
    reqs.push_back(r);
  }
  const RunResult r = run_virtual(e, at_zero(reqs));
  int drafted = 0;
  for (const StepOutcome& s : r.steps) drafted += s.spec_draft_tokens;
  for (const auto& [id, f] : r.finished) EXPECT_TRUE(f.error.empty()) << "request " << id << ": " << f.error;
  EXPECT_EQ(r.finished.size(), 6u);
  EXPECT_GT(drafted, 0);
  EXPECT_EQ(draft.graph_captures(), warmed) << "a shape the warm-up missed was captured while serving";
}

}  // namespace spec_gpu_test
}  // namespace servelab
