// Model proposers on a backend the caller builds (what make_proposer does beside a cuda target:
// a CudaBackend of the draft's weights), run here on the cpu backend through the same path: the
// draft's own sampler draws each draft (no host logits, no q), with the key the target's draw at
// that position uses, and the drafts go to the target as point masses. Also the synthesized
// weights (BackendSpec::residual_scale) and first_layers that build a self draft on a device.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/make_backend.h"
#include "engine/model/residual_scale.h"
#include "engine/model/weights.h"
#include "engine/spec/adaptive.h"
#include "engine/spec/draft_weights.h"
#include "engine/spec/model_proposer.h"
#include "engine/spec/spec_config.h"
#include "tests/engine/engine_test_support.h"
#include "tests/engine/spec_meter_feed.h"

namespace servelab {
namespace spec_backend_draft_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

std::unique_ptr<Backend> cpu_of(std::shared_ptr<const ModelWeights> w) {
  CpuBackendOptions o;
  o.n_threads = 1;
  return std::make_unique<CpuBackend>(std::move(w), o);
}

std::shared_ptr<const ModelWeights> scaled_micro(float scale) {
  ModelWeights w = ModelWeights::random(micro_model(), 11);
  scale_residual_branches(w, 1, scale);
  return std::make_shared<const ModelWeights>(std::move(w));
}

/// `self` with one layer, on a backend handed in (the device path), not on shared weights.
std::unique_ptr<Proposer> backend_self(const std::shared_ptr<const ModelWeights>& target) {
  ModelProposerOptions o;
  o.kv_cache_bytes = 1 << 20;
  o.max_model_len = 128;
  o.max_num_seqs = 8;
  auto draft = cpu_of(std::make_shared<const ModelWeights>(first_layers(*target, 1)));
  return std::make_unique<ModelProposer>("self", std::move(draft), target->config.vocab_size, o);
}

std::vector<Request> requests(float temperature) {
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r = make_request(i, 5 + 4 * i, 12 + 2 * i);
    r.sampling.temperature = temperature;
    r.sampling.seed = 700 + uint64_t(i);
    reqs.push_back(r);
  }
  return reqs;
}

std::map<uint64_t, std::vector<TokenId>> outputs(const RunResult& r) {
  std::map<uint64_t, std::vector<TokenId>> m;
  for (const auto& [id, f] : r.finished) m[id] = f.outputs.at(0);
  return m;
}

struct Counts {
  int drafted = 0, accepted = 0;
};

Counts run_counts(const RunResult& r) {
  Counts c;
  for (const StepOutcome& s : r.steps) {
    c.drafted += s.spec_draft_tokens;
    c.accepted += s.spec_accepted_tokens;
  }
  return c;
}

RunResult run(const std::shared_ptr<const ModelWeights>& target, float temperature, bool speculate) {
  EngineConfig ec = paged_config(continuous_sched(6, 64, true), 1 << 20);
  ec.kv.max_model_len = 128;
  Engine e(ec, cpu_of(target));
  if (speculate) e.set_proposer(backend_self(target), 3);
  RunResult r = run_virtual(e, at_zero(requests(temperature)));
  if (speculate) {
    const auto& mp = dynamic_cast<const ModelProposer&>(*e.proposer());
    EXPECT_EQ(mp.n_sequences(), 0) << "the draft forgets finished sequences";
    EXPECT_EQ(mp.kv().free_slots(), mp.kv().capacity_slots()) << "and gives back their K/V";
  }
  return r;
}

TEST(BackendDraft, OutputsEqualTheRunWithoutDraftsGreedyAndSampled) {
  const auto target = scaled_micro(0.5f);
  for (const float temperature : {0.0f, 0.8f}) {
    const RunResult plain = run(target, temperature, false);
    const RunResult spec = run(target, temperature, true);
    EXPECT_EQ(outputs(spec), outputs(plain)) << "temperature " << temperature;
    const Counts c = run_counts(spec);
    EXPECT_GT(c.drafted, 0);
    EXPECT_GT(c.accepted, 0) << "temperature " << temperature;
    EXPECT_LT(c.accepted, c.drafted) << "the damped layer still disagrees sometimes";
  }
}

TEST(BackendDraft, SampledDraftsShareTheTargetsDrawSoAnExactDraftIsAlwaysAccepted) {
  // The target's second layer adds nothing (scale 0): its first layer computes the same logits.
  // The draft's sampler draws with the key of the target's draw at that position, so at
  // temperature 0.8 every draft is the token the target draws: all accepted.
  const RunResult r = run(scaled_micro(0.0f), 0.8f, true);
  const Counts c = run_counts(r);
  ASSERT_GT(c.drafted, 0);
  EXPECT_EQ(c.accepted, c.drafted);
}

TEST(BackendDraft, ResidualScaleAndFirstLayersBuildTheSameModelsAsTheWeightTools) {
  BackendSpec spec;
  spec.model = "tiny";
  spec.seed = 5;
  spec.threads = 1;
  spec.residual_scale = ResidualScale{1, 0.25f};
  BackendFactory factory(spec);
  ModelWeights want = ModelWeights::random(preset("tiny"), 5);
  scale_residual_branches(want, 1, 0.25f);
  ASSERT_TRUE(factory.weights());
  for (size_t l = 0; l < want.layers.size(); ++l) {
    EXPECT_EQ(factory.weights()->layers[l].wo, want.layers[l].wo) << "layer " << l;
    EXPECT_EQ(factory.weights()->layers[l].w_down, want.layers[l].w_down) << "layer " << l;
    EXPECT_EQ(factory.weights()->layers[l].wq, want.layers[l].wq) << "layer " << l;
  }

  BackendSpec draft = spec;
  draft.first_layers = 1;
  const std::unique_ptr<Backend> b = make_backend(draft);
  EXPECT_EQ(b->config().n_layers, 1);
  EXPECT_EQ(b->config().name, preset("tiny").name + "-first1");
  draft.first_layers = 99;
  EXPECT_THROW(make_backend(draft), std::invalid_argument);
  spec.residual_scale = ResidualScale{-1, 0.5f};
  EXPECT_THROW(spec.validate(), std::invalid_argument);
}

TEST(BackendDraft, MakeProposerNamesWhereADraftModelCannotRun) {
  SpeculativeConfig c;
  c.method = SpecMethod::self;
  c.num_layers = 1;
  ProposerTarget sim_target;
  BackendSpec sim;
  sim.kind = BackendKind::sim;
  sim_target.backend = sim;
  try {
    (void)make_proposer(c, sim_target);
    FAIL() << "a draft model on the sim backend";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("backend cpu or cuda (got backend sim)"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)make_proposer(c, ProposerTarget{}), std::invalid_argument);
}

}  // namespace spec_backend_draft_test
}  // namespace servelab

namespace servelab {
namespace spec_backend_draft_test {

TEST(SpecRateMeter, MeasuresBothChoicesThenKeepsTheFasterAndLooksAgain) {
  SpecRateMeter m;
  std::vector<SpecChoice> choices;
  // Batch 8: drafts yield 50 tokens/s, plain steps 100: after warming both, plain wins.
  for (int i = 0; i < 200; ++i) {
    const SpecChoice c = m.choose(8);
    choices.push_back(c);
    feed_meter(m, 8, c, 100.0, 50.0, 8, 2);
  }
  for (int i = 0; i < SpecRateMeter::kWarm; ++i) EXPECT_EQ(choices[size_t(i)], SpecChoice::plain) << "plain first";
  for (int i = SpecRateMeter::kWarm; i < 2 * SpecRateMeter::kWarm; ++i)
    EXPECT_EQ(choices[size_t(i)], SpecChoice::probe) << "then drafts, probed";
  int on_after = 0;
  for (size_t i = 2 * SpecRateMeter::kWarm; i < choices.size(); ++i) {
    on_after += choices[i] != SpecChoice::plain;
    EXPECT_NE(choices[i], SpecChoice::drafts) << "drafts for all only where they won";
  }
  // Tried again now and then: every kExploreFar steps, as plain leads by more than kFar.
  EXPECT_GE(on_after, 1);
  EXPECT_LE(on_after, 2);
  EXPECT_TRUE(m.decided(8));
  EXPECT_FALSE(m.decided(64));
  EXPECT_NEAR(m.rate(8, true), 50.0, 1e-9) << "the probes of 4 scaled to the batch of 8";
  EXPECT_NEAR(m.rate(8, false), 100.0, 1e-9);
  // Another batch bucket has its own figures; batch 7 shares batch 8's.
  EXPECT_EQ(m.rate(32, true), 0.0);
  EXPECT_EQ(m.rate(7, false), m.rate(8, false));
  // Batch 16 and 2 are new buckets: 16 (one bucket from 8's clear verdict) follows it from its
  // first step; 2 (two buckets away) too; 64 (three away) warms up, plain first.
  EXPECT_EQ(m.choose(16), SpecChoice::plain);
  EXPECT_EQ(m.choose(2), SpecChoice::plain);
  EXPECT_EQ(m.choose(64), SpecChoice::plain);
  int followed = 0;
  for (int i = 0; i < 300; ++i) {
    const SpecChoice c = m.choose(16);
    feed_meter(m, 16, c, 160.0, 50.0, 16, 4);
    followed += c == SpecChoice::plain;
  }
  EXPECT_GE(followed, 295);  // ... measuring drafts only every kExploreFar steps
  EXPECT_FALSE(m.decided(16));
  // Close rates: the loser is tried every kExplore steps.
  SpecRateMeter c;
  int tried = 0;
  for (int i = 0; i < 2 * SpecRateMeter::kWarm + 128; ++i) {
    const SpecChoice ch = c.choose(4);
    feed_meter(c, 4, ch, 400.0, 480.0, 4, 1);  // drafts 20% faster
    if (i >= 2 * SpecRateMeter::kWarm) tried += ch == SpecChoice::plain;
  }
  EXPECT_GE(tried, 3);
  EXPECT_LE(tried, 5);
  // Drafts ahead by less than kMargin (5%) do not run for all: plain runs, drafts explored.
  SpecRateMeter near;
  int for_all = 0;
  for (int i = 0; i < 2 * SpecRateMeter::kWarm + 128; ++i) {
    const SpecChoice ch = near.choose(4);
    feed_meter(near, 4, ch, 400.0, 420.0, 4, 1);
    for_all += ch == SpecChoice::drafts;
  }
  EXPECT_EQ(for_all, 0);
  EXPECT_GT(near.rate(4, true), near.rate(4, false));
  // Where drafts measure faster they run for all once measured.
  SpecRateMeter w;
  int on = 0;
  for (int i = 0; i < 100; ++i) {
    const SpecChoice ch = w.choose(1);
    feed_meter(w, 1, ch, 100.0, 300.0, 2, 2);
    on += ch == SpecChoice::drafts;
  }
  EXPECT_GE(on, 85);
}

/// A backend whose steps with more than one row per sequence (verification) take 20x longer on
/// the virtual clock: drafts that a cost model would approve are a measured loss.
class SlowVerification final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  StepOutput execute(const Step& step) override {
    StepOutput out = inner().execute(step);
    const bool multi = step.in.n_tokens() > step.in.n_seqs();
    out.predicted_s = (multi ? 20.0 : 1.0) * 1e-3;
    return out;
  }
};

TEST(SpecRateMeter, TheEngineStopsDraftingWhereVerificationMeasuresSlower) {
  const auto target = scaled_micro(0.0f);  // every draft right: only the cost makes them a loss
  auto run_with = [&](bool measured, int* drafted_steps, int* steps) {
    EngineConfig ec = paged_config(continuous_sched(6, 64, true), 1 << 20);
    ec.kv.max_model_len = 128;
    Engine e(ec, std::make_unique<SlowVerification>(cpu_of(target)));
    SpecPolicy policy;
    policy.num_speculative_tokens = 3;
    policy.measured = measured;
    e.set_proposer(backend_self(target), std::move(policy));
    std::vector<Request> reqs = requests(0.0f);
    for (Request& r : reqs) r.sampling.max_tokens = 60;
    const RunResult r = run_virtual(e, at_zero(reqs));
    *drafted_steps = 0;
    *steps = static_cast<int>(r.steps.size());
    for (const StepOutcome& s : r.steps) *drafted_steps += s.spec_drafts > 0 || s.spec_probe;
    return outputs(r);
  };
  int d0, n0, d1, n1;
  const auto always = run_with(false, &d0, &n0);
  const auto measured = run_with(true, &d1, &n1);
  EXPECT_EQ(measured, always) << "the choice changes the cost, never the tokens";
  EXPECT_GT(d0, n0 / 2) << "without measurement every decode step drafts";
  EXPECT_LT(d1, d0 / 2) << "measured, drafting stops after it proved slower";
}

}  // namespace spec_backend_draft_test
}  // namespace servelab
