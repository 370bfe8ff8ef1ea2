// The measured per-step rule where drafts lose (issue 27: never a slowdown): its exploring steps
// back off, a probe that measures a gain brings them back, and a step is recorded under the count of
// sequences it was asked for, so every bucket it prices gets decided. Deterministic: a meter fed by
// hand, and an engine on the sim backend whose step times are set per step shape (a virtual clock).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/backend/forwarding_backend.h"
#include "engine/spec/adaptive.h"
#include "engine/spec/proposer.h"
#include "engine/spec/sim_proposer.h"
#include "tests/engine/engine_test_support.h"
#include "tests/engine/spec_meter_feed.h"

namespace servelab {
namespace spec_meter_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

/// Feeds `m` `n` steps at batch 32: plain steps yield 100 tokens/s, steps with drafts (for all, or
/// probes scaled to all) draft_rate(i) tokens/s with 80 of their 400 draft tokens accepted (20 in a
/// probe of 8). Returns the indices of the steps that carried drafts.
template <class Rate>
std::vector<int> drive(SpecRateMeter& m, int n, Rate draft_rate) {
  std::vector<int> on;
  for (int i = 0; i < n; ++i) {
    const SpecChoice c = m.choose(32);
    if (c != SpecChoice::plain) on.push_back(i);
    feed_meter(m, 32, c, 100.0, draft_rate(i), 400, c != SpecChoice::plain ? 80 : 0);
  }
  return on;
}

std::vector<int> gaps_after_warmup(const std::vector<int>& on) {
  std::vector<int> g;
  for (size_t i = SpecRateMeter::kWarm + 1; i < on.size(); ++i) g.push_back(on[i] - on[i - 1]);
  return g;
}

TEST(SpecRateMeter, ExploringBacksOffWhileDraftsKeepLosing) {
  // Drafts at half the plain rate: every counted probe that confirms the loss doubles the interval
  // to the next exploration, up to kExploreMax; the warm-up's two counted probes (kWarm, the first
  // not counted) make the first one come 4 kExploreFar steps after it.
  SpecRateMeter m;
  const std::vector<int> on = drive(m, 20000, [](int) { return 50.0; });
  ASSERT_GE(on.size(), size_t(SpecRateMeter::kWarm) + 2);
  for (int i = 0; i < SpecRateMeter::kWarm; ++i) EXPECT_EQ(on[size_t(i)], SpecRateMeter::kWarm + i) << "plain first";
  EXPECT_EQ(on[SpecRateMeter::kWarm], 2 * SpecRateMeter::kWarm - 1 + 4 * SpecRateMeter::kExploreFar);
  EXPECT_EQ(gaps_after_warmup(on), (std::vector<int>{1024, 2048, 4096, 4096, 4096, 4096}));
  EXPECT_LT(double(on.size()) / 20000.0, 0.001) << "without the backoff one step in 128 drafted";
  EXPECT_EQ(m.explore_interval(32), SpecRateMeter::kExploreMax);
  EXPECT_EQ(m.explore_interval(128), 0) << "a bucket not measured has none";

  // Drafts that turn winning (120 tokens/s from step 3000 on, the third exploration): the probe that measures
  // the gain brings the interval back to kExploreFar (the average, 67.5, still loses by more than
  // kFar), the next one to kExplore (80.6: under kFar), and once the average passes plain's rate
  // the bucket drafts for all (every step but an exploring plain one each kExplore).
  SpecRateMeter r;
  const std::vector<int> on_r = drive(r, 4000, [](int i) { return i >= 3000 ? 120.0 : 50.0; });
  const std::vector<int> gaps = gaps_after_warmup(on_r);
  ASSERT_GE(gaps.size(), size_t(6));
  EXPECT_EQ(std::vector<int>(gaps.begin(), gaps.begin() + 6), (std::vector<int>{1024, 2048, 128, 32, 32, 32}));
  EXPECT_GT(r.rate(32, true), r.rate(32, false));
  EXPECT_EQ(r.explore_interval(32), SpecRateMeter::kExplore);
  EXPECT_GT(on_r.size(), size_t(4000 - on_r[SpecRateMeter::kWarm + 6] - 100)) << "drafts for all once they won";

  // Drafts that win by far: the plain step is explored every kExploreFar steps, never backed off
  // (a plain step costs no catch-up), and the drafts run every other step.
  SpecRateMeter w;
  int plain_steps = 0;
  for (int i = 0; i < 4000; ++i) {
    const SpecChoice c = w.choose(32);
    feed_meter(w, 32, c, 100.0, 200.0, 128, 32);
    plain_steps += c == SpecChoice::plain;
  }
  EXPECT_EQ(w.explore_interval(32), SpecRateMeter::kExploreFar);
  EXPECT_EQ(plain_steps, SpecRateMeter::kWarm + (4000 - 2 * SpecRateMeter::kWarm) / SpecRateMeter::kExploreFar);

  // Drafts close behind (under kFar): the same from kExplore, first explored 4 kExplore steps after the warm-up.
  SpecRateMeter c;
  const std::vector<int> on_c = drive(c, 5000, [](int) { return 90.0; });
  EXPECT_EQ(on_c[SpecRateMeter::kWarm], 2 * SpecRateMeter::kWarm - 1 + 4 * SpecRateMeter::kExplore);
  EXPECT_EQ(gaps_after_warmup(on_c), (std::vector<int>{256, 512, 1024, 2048}));

  // Warm-up probes of fewer than kConfirmDrafts draft tokens (4 sequences at k = 3: 12) tell too
  // little of acceptance to back off: the first exploration comes kExploreFar after them, the next
  // ones doubling.
  SpecRateMeter few;
  std::vector<int> on_few;
  for (int i = 0; i < 1000; ++i) {
    const SpecChoice ch = few.choose(4);
    if (ch != SpecChoice::plain) on_few.push_back(i);
    feed_meter(few, 4, ch, 100.0, 50.0, 12, ch != SpecChoice::plain ? 3 : 0);
  }
  ASSERT_EQ(on_few.size(), size_t(SpecRateMeter::kWarm) + 3);
  EXPECT_EQ(on_few[SpecRateMeter::kWarm], 2 * SpecRateMeter::kWarm - 1 + SpecRateMeter::kExploreFar);
  EXPECT_EQ(gaps_after_warmup(on_few), (std::vector<int>{256, 512}));
}

TEST(SpecRateMeter, APlainStepThatCapturesAGraphDoesNotSetThePlainRate) {
  // The first steps of an H200 run (llama2-7b, 32 users, wrong drafts: results/gpu/spec/
  // h200-2026-11-30-e790fdd-warm, wrong32 self-k4-b): the first plain decode step ran the target's
  // graph eagerly (6.27 ms), the second captured it (10.62 ms), later ones took 5.4 ms; the probes
  // of 8 of the 32 sequences took 8.5-9.5 ms with 0-3 of their 32 drafts standing. Averaging the
  // capture in set the plain rate 37% low and the probes, scaled to it, won: drafts ran for all.
  // Plain's warm-up rate is its faster counted step.
  SpecRateMeter m;
  const double plain_ms[] = {6.27, 10.62, 5.42};
  for (double ms : plain_ms) {
    ASSERT_EQ(m.choose(32), SpecChoice::plain);
    m.record(32, false, 32, ms * 1e-3);
  }
  const ProbeStep probes[] = {{8, 32, 9.50e-3, 1.90e-3, 1.07e-3, 32, 0},
                              {8, 32, 8.65e-3, 1.06e-3, 0.0, 32, 3},
                              {8, 32, 8.53e-3, 0.99e-3, 0.0, 32, 2}};
  for (const ProbeStep& p : probes) {
    ASSERT_EQ(m.choose(32), SpecChoice::probe);
    m.record_probe(32, p);
  }
  ASSERT_TRUE(m.decided(32));
  EXPECT_NEAR(m.rate(32, false), 32 / 5.42e-3, 1e-6) << "the steady plain step's rate";
  EXPECT_LT(m.rate(32, true), 0.5 * m.rate(32, false));
  EXPECT_EQ(m.choose(32), SpecChoice::plain);
}

TEST(SpecRateMeter, ProbesOfTwoSizesTellAVerificationsFixedCostFromItsCostPerSequence) {
  // Right drafts at 64 users on an H200 (llama2-7b, self k = 4: results/gpu/spec/
  // h200-2026-11-30-ae00d9e-right, abba-right64): plain steps 6.0 ms; probes of 16 took 11.6-13.0 ms
  // with 50-53 of their 64 drafts standing (the first 14.4, 1.75 of it catch-up), and drafts for all
  // 64 took 14.8 ms: a verification step costs ~5.7 ms more than plain whatever its size (it leaves
  // the decode graphs) and ~0.05 ms per sequence drafting. Scaled by 64 / 16, the probes read drafts
  // at ~7 tokens/ms against plain's 10.7; told apart by probes of 32 and 16, at ~17.
  auto run = [](double fixed_ms, double per_seq_ms) {
    SpecRateMeter m;
    for (int i = 0; i < SpecRateMeter::kWarm; ++i) {
      EXPECT_EQ(m.choose(64), SpecChoice::plain);
      m.record(64, false, 64, 6.0e-3);
    }
    std::vector<int> sizes;
    for (int i = 0; i < SpecRateMeter::kWarm; ++i) {
      EXPECT_EQ(m.choose(64), SpecChoice::probe);
      const int n = m.next_probe_size(64);
      sizes.push_back(n);
      const double catch_up = i == 0 ? 1.75e-3 : 0.0;
      const double s = 6.0e-3 + (fixed_ms + per_seq_ms * n) * 1e-3 + catch_up;
      m.record_probe(64, ProbeStep{n, 64, s, 1.1e-3 + catch_up, catch_up, 4 * n, 51 * n / 16});
    }
    EXPECT_EQ(sizes, (std::vector<int>{32, 16, 32})) << "large first: its catch-up covers the small ones'";
    EXPECT_TRUE(m.decided(64));
    return m;
  };
  SpecRateMeter fixed = run(5.7, 0.05);
  EXPECT_NEAR(fixed.rate(64, true), (64 + 4 * 51) / (6.0 + 5.7 + 0.05 * 64) * 1e3, 1.0);
  EXPECT_EQ(fixed.choose(64), SpecChoice::drafts);
  // The same probes of 16 (6.5 ms beyond plain), but the cost grows with the sequences drafting:
  // the two sizes read it so, and drafts lose.
  SpecRateMeter grows = run(0.0, 6.5 / 16);
  EXPECT_NEAR(grows.rate(64, true), (64 + 4 * 51) / (6.0 + 6.5 * 4) * 1e3, 1.0);
  EXPECT_EQ(grows.choose(64), SpecChoice::plain);
  // Probes of one size (hand-fed, as before): scaled by batch / n, the loss they read.
  SpecRateMeter one;
  for (int i = 0; i < SpecRateMeter::kWarm; ++i) one.record(64, false, 64, 6.0e-3);
  for (int i = 0; i < SpecRateMeter::kWarm; ++i) one.record_probe(64, ProbeStep{16, 64, 12.5e-3, 1.1e-3, 0.0, 64, 51});
  EXPECT_NEAR(one.rate(64, true), (64 + 4 * 51) / (6.0 + 6.5 * 4) * 1e3, 1.0);
}

/// Steps with more than one row per sequence (verification) take 3 ms of the virtual clock, others
/// 1 ms: drafts that are almost never accepted are a loss by far.
class SlowVerify final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  StepOutput execute(const Step& step) override {
    StepOutput out = inner().execute(step);
    out.predicted_s = (step.in.n_samples() > step.in.n_seqs() ? 3.0 : 1.0) * 1e-3;  // a shape-only step has no token ids
    return out;
  }
};

/// Proposes `k` copies of token 7 (the sim's draws rarely equal it).
class ConstantProposer final : public Proposer {
 public:
  const char* name() const override { return "constant"; }
  void propose(const Sequence&, int max_k, std::vector<TokenId>& draft) override { draft.assign(size_t(max_k), 7); }
};

TEST(SpecRateMeter, AStepIsRecordedUnderTheCountItWasAskedBy) {
  // Two requests draft; a third samples n = 3 sequences, which never draft but are in every step:
  // 2 sequences are asked (bucket 2), 5 run (bucket 8). Recorded under 5, bucket 2 stayed in its
  // warm-up and drafted every step; recorded under 2, it is decided after 2 kWarm decode steps.
  EngineConfig ec = paged_config(continuous_sched(8, 256, true), 1 << 20);
  ec.kv.max_model_len = 256;
  Engine e(ec, std::make_unique<SlowVerify>(sim_backend()));
  SpecPolicy policy;
  policy.num_speculative_tokens = 3;
  policy.measured = true;
  e.set_proposer(std::make_unique<ConstantProposer>(), std::move(policy));
  Request par = make_request(2, 16, 120);
  par.sampling.n = 3;
  par.sampling.temperature = 1.0f;
  const RunResult r = run_virtual(e, at_zero({make_request(0, 16, 120), make_request(1, 24, 120), par}));
  int drafted = 0, off = 0;
  for (const StepOutcome& s : r.steps) {
    drafted += s.spec_drafts > 0 || s.spec_probe;
    off += s.spec_off;
  }
  ASSERT_EQ(r.finished.size(), 3u);
  EXPECT_LE(drafted, 2 * SpecRateMeter::kWarm) << "warm-up steps only: one exploring step comes after kExploreFar";
  EXPECT_GE(off, 100) << "drafts stay off once measured slower";
}

TEST(SpecRateMeter, ProbesDraftForTheLeastCaughtUpAndMoveNoSequenceAhead) {
  // Eight requests of one length start together; `self` on the sim accepts each draft at 0.5 (a
  // draft that stood would move its sequence ahead), verification costs 3x a plain step, so the
  // rule measures drafts (kWarm probes, one exploring probe after kExploreFar steps) and keeps
  // them off. Probes draft for 8 (large_probe_size), 4 (probe_size), 8, 4 sequences, keep only each
  // one's first draw, and the requests all finish in one step.
  auto backend = std::make_unique<SimBackend>(micro_model(), SimCostModel::roofline(SimDevice::preset("h100")));
  SimBackend& sim = *backend;
  EngineConfig ec = paged_config(continuous_sched(8, 512, true), 1 << 20);
  ec.kv.max_model_len = 512;
  Engine e(ec, std::make_unique<SlowVerify>(std::move(backend)));
  SpeculativeConfig sc;
  sc.method = SpecMethod::self;
  sc.num_layers = 1;
  sc.num_speculative_tokens = 3;
  sc.sim_acceptance = SimAcceptance{{0.5, 0.5, 0.5}, "test", {}};
  SpecPolicy policy;
  policy.num_speculative_tokens = 3;
  policy.measured = true;
  e.set_proposer(make_sim_proposer(sc, sim), std::move(policy));
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(make_request(i, 16, 200));
  const RunResult r = run_virtual(e, at_zero(reqs));
  ASSERT_EQ(r.finished.size(), 8u);
  for (const auto& [id, f] : r.finished) {
    EXPECT_EQ(f.n_output, 200);
    EXPECT_EQ(f.end_s, r.finished.begin()->second.end_s) << "request " << id << " moved out of the lockstep";
  }
  std::vector<const StepOutcome*> probes;
  int would_stand = 0;
  for (const StepOutcome& s : r.steps) {
    EXPECT_EQ(s.spec_drafts, 0) << "no step drafted for all";
    if (!s.spec_probe) continue;
    probes.push_back(&s);
    EXPECT_EQ(s.spec_probe_drafts, probes.size() % 2 == 1 ? 8 : SpecRateMeter::probe_size(8)) << "large, then small";
    EXPECT_EQ(s.spec_accepted_tokens, 0);
    would_stand += s.spec_probe_accepted_tokens;
  }
  ASSERT_EQ(probes.size(), size_t(SpecRateMeter::kWarm) + 1) << "the warm-up's probes and one exploring probe";
  EXPECT_GT(would_stand, 4) << "kept, accepted drafts would have moved sequences ahead";
  // The first probe catches all 8 drafts up on their prompts; the next two draft for 4 and 8 of
  // them, 1-2 rows behind: no catch-up beyond a steady one.
  EXPECT_GT(probes[0]->spec_catch_up_s, 0.0);
  EXPECT_EQ(probes[1]->spec_catch_up_s, 0.0);
  EXPECT_EQ(probes[2]->spec_catch_up_s, 0.0);
  EXPECT_GT(probes[3]->spec_catch_up_s, 0.0) << "the exploring probe after kExploreFar plain steps";
}

}  // namespace spec_meter_test
}  // namespace servelab
