// Speculative decoding on the sim backend: drafts accepted at the rates given (statistically,
// seeded), acceptance recovered from a run's counters whatever the mix of draft lengths, and
// drafting priced for the draft model on the target's device.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "analysis/metrics.h"
#include "engine/backend/draft_pricer.h"
#include "engine/backend/hardware.h"
#include "engine/backend/sim_backend.h"
#include "engine/spec/adaptive.h"
#include "engine/spec/sim_acceptance.h"
#include "engine/spec/sim_proposer.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace sim_spec_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

SpeculativeConfig spec_config(SpecMethod method, std::vector<double> per_position) {
  SpeculativeConfig c;
  c.method = method;
  c.num_speculative_tokens = static_cast<int>(per_position.size());
  if (method == SpecMethod::self) c.num_layers = 1;
  c.adaptive = false;
  c.sim_acceptance = SimAcceptance{std::move(per_position), "test"};
  return c;
}

/// 64 requests of 200 output tokens on the micro model, drafting k = per_position.size() tokens.
RunResult run_spec(const SpeculativeConfig& c, uint64_t salt = 0) {
  auto backend = std::make_unique<SimBackend>(micro_model(), SimCostModel::roofline(SimDevice::preset("h100")));
  SimBackend& sim = *backend;
  Engine engine(paged_config(continuous_sched(16, 512, true), 8 << 20), std::move(backend));
  SpecPolicy policy;
  policy.num_speculative_tokens = c.num_speculative_tokens;
  policy.adaptive = c.adaptive;
  engine.set_proposer(make_sim_proposer(c, sim), std::move(policy));
  std::vector<Request> reqs;
  for (int i = 0; i < 64; ++i) {
    Request r = make_request(i, 16 + i % 7, 200, salt);
    r.sampling.seed = 1000 + i + salt;
    reqs.push_back(r);
  }
  return run_virtual(engine, at_zero(reqs));
}

struct Counts {
  int64_t drafts = 0;
  std::vector<int64_t> accepted, drafted;
};
Counts counts_of(const RunResult& r) {
  Counts c;
  for (const StepOutcome& s : r.steps) {
    c.drafts += s.spec_drafts;
    c.accepted.resize(std::max(c.accepted.size(), s.spec_accepted_per_pos.size()), 0);
    c.drafted.resize(std::max(c.drafted.size(), s.spec_drafted_per_pos.size()), 0);
    for (size_t j = 0; j < s.spec_accepted_per_pos.size(); ++j) c.accepted[j] += s.spec_accepted_per_pos[j];
    for (size_t j = 0; j < s.spec_drafted_per_pos.size(); ++j) c.drafted[j] += s.spec_drafted_per_pos[j];
  }
  return c;
}

TEST(SimSpeculation, DraftsAreAcceptedAtTheGivenConditionalRates) {
  const std::vector<double> p = {0.9, 0.6, 0.3};
  const RunResult r = run_spec(spec_config(SpecMethod::ngram, p));
  const Counts c = counts_of(r);
  ASSERT_GT(c.drafts, 2000);
  ASSERT_EQ(c.accepted.size(), 3u);
  // Draft j is tried when drafts < j were accepted: its conditional rate is accepted[j] / tried.
  double tried = static_cast<double>(c.drafts);
  for (size_t j = 0; j < 3; ++j) {
    const double rate = c.accepted[j] / tried;
    const double sigma = std::sqrt(p[j] * (1 - p[j]) / tried);
    EXPECT_NEAR(rate, p[j], 4 * sigma + 1e-9) << "position " << j << " of " << tried << " tries";
    tried = static_cast<double>(c.accepted[j]);
  }
  // Every request still gets all its tokens: accepted drafts and the bonus draws add up.
  for (const auto& [id, f] : r.finished) EXPECT_EQ(f.outputs.at(0).size(), 200u) << id;
  // Seeded: the same scenario gives the same counts; another seed other ones.
  const Counts again = counts_of(run_spec(spec_config(SpecMethod::ngram, p)));
  EXPECT_EQ(again.accepted, c.accepted);
  EXPECT_NE(counts_of(run_spec(spec_config(SpecMethod::ngram, p), 1000)).accepted, c.accepted);
}

TEST(SimSpeculation, CertainAndImpossibleDraftsEndToEnd) {
  const Counts all = counts_of(run_spec(spec_config(SpecMethod::ngram, {1.0, 1.0})));
  EXPECT_EQ(all.accepted.at(0), all.drafts);
  EXPECT_EQ(all.accepted.at(1), all.drafts);
  const Counts none = counts_of(run_spec(spec_config(SpecMethod::ngram, {0.0, 1.0})));
  ASSERT_GT(none.drafts, 0);
  EXPECT_EQ(none.accepted.size() > 0 ? none.accepted[0] : 0, 0);
}

TEST(SimSpeculation, AcceptanceIsRecoveredFromCountersWithAdaptiveK) {
  // Adaptive k mixes draft lengths; the conditional rates come back from the run's counters only
  // with the drafts per position (accepted[j] / accepted[j - 1] would undercount).
  SpeculativeConfig c = spec_config(SpecMethod::ngram, {0.85, 0.7, 0.6, 0.5});
  c.adaptive = true;
  SimAcceptance given = *c.sim_acceptance;
  const Counts n = counts_of(run_spec(c));
  ASSERT_GT(n.drafted.at(0), n.drafted.at(3));  // lengths do differ
  const SimAcceptance got = SimAcceptance::from_counters(n.drafts, n.accepted, n.drafted);
  for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(got.per_position[j], given.per_position[j], 0.05) << j;
  const SimAcceptance naive = SimAcceptance::from_counters(n.drafts, n.accepted, {});
  EXPECT_LT(naive.per_position[3], given.per_position[3] - 0.05);  // what the per-position counts alone give
}

TEST(SimSpeculation, TheSummaryCarriesTheCounters) {
  // summary.json's metrics.spec_decode sums the steps' counters, drafts per position included.
  const RunResult r = run_spec(spec_config(SpecMethod::ngram, {0.7, 0.7}));
  std::vector<StepRecord> steps;
  for (const StepOutcome& s : r.steps) {
    StepRecord st;
    st.run = "sim";
    st.start_s = s.start_s;
    st.duration_s = s.duration_s;
    st.batch_size = s.batch_size;
    st.spec_drafts = s.spec_drafts;
    st.spec_draft_tokens = s.spec_draft_tokens;
    st.spec_accepted_tokens = s.spec_accepted_tokens;
    st.spec_accepted_per_pos = s.spec_accepted_per_pos;
    st.spec_drafted_per_pos = s.spec_drafted_per_pos;
    steps.push_back(st);
  }
  const analysis::KvMetrics kv = analysis::compute_kv_metrics("sim", steps, 0.0, 1e9);
  nlohmann::ordered_json j;
  analysis::RunMetrics m;
  m.kv = kv;
  analysis::to_json(j, m);
  ASSERT_TRUE(j.contains("spec_decode"));
  const Counts c = counts_of(r);
  EXPECT_EQ(j["spec_decode"]["num_drafts"], c.drafts);
  EXPECT_EQ(j["spec_decode"]["num_accepted_tokens_per_pos"], c.accepted);
  EXPECT_EQ(j["spec_decode"]["num_draft_tokens_per_pos"], c.drafted);
  EXPECT_EQ(c.drafted.at(0), c.drafts);
}

TEST(SimAcceptance, ValidationNamesTheBadEntry) {
  SimAcceptance a{{0.5, 1.5}, "test"};
  try {
    a.validate();
    FAIL() << "accepted 1.5";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "sim_acceptance.per_position[1] must be in [0, 1] (got 1.500000)");
  }
  EXPECT_THROW((SimAcceptance{{}, ""}).validate(), std::invalid_argument);
  EXPECT_THROW(SimAcceptance::from_counters(0, {1}, {}), std::invalid_argument);
  EXPECT_THROW(SimAcceptance::from_counters(10, {11}, {}), std::invalid_argument);  // more accepted than drafted
  EXPECT_THROW(SimAcceptance::from_summary("/nonexistent/summary.json", ""), std::runtime_error);
  EXPECT_NEAR((SimAcceptance{{0.5, 0.5}, ""}).expected_accepted(2), 0.75, 1e-12);
}

TEST(SimSpeculation, SelfDraftingIsPricedAndChargedToTheStep) {
  // The same acceptance: ngram drafts for free, self pays the draft model's steps.
  const RunResult ngram = run_spec(spec_config(SpecMethod::ngram, {0.8, 0.8}));
  const RunResult self = run_spec(spec_config(SpecMethod::self, {0.8, 0.8}));
  double ngram_s = 0, self_s = 0, draft_s = 0;
  for (const StepOutcome& s : ngram.steps) {
    ngram_s += s.duration_s;
    EXPECT_EQ(s.spec_draft_s, 0.0);
  }
  for (const StepOutcome& s : self.steps) self_s += s.duration_s, draft_s += s.spec_draft_s;
  EXPECT_EQ(counts_of(ngram).accepted, counts_of(self).accepted);  // drafting cost moves no coin
  EXPECT_GT(draft_s, 0.0);
  EXPECT_NEAR(self_s, ngram_s + draft_s, 1e-9 * self_s);
}

TEST(DraftPricer, RooflineForTheDraftAndAProfileScaledToIt) {
  const ModelConfig target = preset("llama2-7b");
  ModelConfig draft = target;
  draft.n_layers = 2;
  const SimCostModel roof = SimCostModel::roofline(SimDevice::preset("h100"));
  StepShape decode;
  decode.n_tokens = decode.n_sampled = decode.n_seqs = 4;
  decode.sum_context = decode.max_context = 512;
  decode.attention_pairs = decode.decode_context = 4 * 512;
  const DraftPricer p(roof, target, draft);
  EXPECT_DOUBLE_EQ(p.seconds(decode), roof.step_seconds(draft, decode));
  EXPECT_LT(p.seconds(decode), 0.2 * roof.step_seconds(target, decode));
  // The adaptive rule's prior prices the draft the same way.
  SpecPricing pricing{roof, target, draft};
  const DrawingSeq seq{512, 4, 0.8};
  const SpecVerdict v = price_speculation(pricing, std::span<const DrawingSeq>(&seq, 1));
  StepShape one;
  one.n_tokens = one.n_sampled = one.n_seqs = 1;
  one.sum_context = one.max_context = 512;
  one.attention_pairs = one.decode_context = 512;
  EXPECT_DOUBLE_EQ(v.draft_s, 4 * p.seconds(one));
  // Its pricers are built once and kept (a verdict used to rebuild them: ~4 ms of host time): a
  // copy shares them and prices the same bits after the original is gone; another draft is seen.
  const SpecPricers* built = pricing.pricers.get();
  ASSERT_NE(built, nullptr);
  auto original = std::make_unique<SpecPricing>(pricing);
  const SpecPricing copy = *original;
  original.reset();
  const SpecVerdict again = price_speculation(copy, std::span<const DrawingSeq>(&seq, 1));
  EXPECT_EQ(copy.pricers.get(), built);
  EXPECT_EQ(again.decode_s, v.decode_s);
  EXPECT_EQ(again.verify_s, v.verify_s);
  EXPECT_EQ(again.draft_s, v.draft_s);
  EXPECT_EQ(v.decode_s, roof.step_seconds(target, one));
  pricing.draft->n_layers = 4;
  const SpecVerdict deeper = price_speculation(pricing, std::span<const DrawingSeq>(&seq, 1));
  EXPECT_NE(pricing.pricers.get(), built);
  EXPECT_GT(deeper.draft_s, 1.2 * v.draft_s);
  EXPECT_EQ(deeper.verify_s, v.verify_s);
}

}  // namespace sim_spec_test
}  // namespace servelab
