// Speculative decoding on the sim backend: drafts accepted at the rates given (statistically,
// seeded), acceptance recovered from a run's counters whatever the mix of draft lengths, and
// drafting priced for the draft model on the target's device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>

#include "analysis/metrics.h"
#include "engine/backend/draft_pricer.h"
#include "engine/backend/hardware.h"
#include "engine/backend/sim_backend.h"
#include "engine/spec/adaptive.h"
#include "engine/spec/sim_acceptance.h"
#include "engine/spec/sim_proposer.h"
#include "engine/splitmix64.h"
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
  c.sim_acceptance = SimAcceptance{std::move(per_position), "test", {}};
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
  SimAcceptance a{{0.5, 1.5}, "test", {}};
  try {
    a.validate();
    FAIL() << "accepted 1.5";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "sim_acceptance.per_position[1] must be in [0, 1] (got 1.500000)");
  }
  EXPECT_THROW((SimAcceptance{{}, "", {}}).validate(), std::invalid_argument);
  EXPECT_THROW(SimAcceptance::from_counters(0, {1}, {}), std::invalid_argument);
  EXPECT_THROW(SimAcceptance::from_counters(10, {11}, {}), std::invalid_argument);  // more accepted than drafted
  EXPECT_THROW(SimAcceptance::from_summary("/nonexistent/summary.json", ""), std::runtime_error);
  EXPECT_NEAR((SimAcceptance{{0.5, 0.5}, "", {}}).expected_accepted(2), 0.75, 1e-12);
}

/// Requests of 256 tokens at k <= 4 (adaptive), request i rejecting at scales[i % size] times
/// the rates 1 - p: the counts request_acceptance.py recovers from a real run's records.
std::vector<SimAcceptance::RequestCounts> synth_requests(int n, const std::vector<double>& scales,
                                                         const std::vector<double>& p, uint64_t seed) {
  const int k_max = static_cast<int>(p.size());
  std::vector<SimAcceptance::RequestCounts> out;
  uint64_t state = seed;
  for (int i = 0; i < n; ++i) {
    SimAcceptance::RequestCounts c{std::vector<int64_t>(p.size(), 0), std::vector<int64_t>(p.size(), 0), 256};
    const double s = scales[size_t(i) % scales.size()];
    for (int generated = 1, k = k_max; generated < c.n_output;) {
      const int room = std::min(k, c.n_output - generated - 1);
      int a = 0;
      while (a < room) {
        ++c.tried[size_t(a)];
        if (static_cast<double>(splitmix64_next(state) >> 11) * 0x1.0p-53 >= 1.0 - s * (1.0 - p[size_t(a)])) break;
        ++c.accepted[size_t(a++)];
      }
      generated += a + 1;
      if (room >= 1) k = next_num_drafts(k, room, a, k_max);
    }
    out.push_back(c);
  }
  return out;
}

double mean_of(const std::vector<double>& x) {
  double m = 0.0;
  for (double v : x) m += v;
  return m / static_cast<double>(x.size());
}
double sd_of(const std::vector<double>& x) {
  const double m = mean_of(x);
  double ss = 0.0;
  for (double v : x) ss += (v - m) * (v - m);
  return std::sqrt(ss / static_cast<double>(x.size() - 1));
}

TEST(SimAcceptance, RequestSpreadIsWhatRequestsDifferByBeyondSamplingNoise) {
  const std::vector<double> p = {0.9, 0.9, 0.9, 0.9};
  // Alike requests: what their rejections vary by is the noise the replays measure.
  const auto alike = SimAcceptance::request_spread(synth_requests(300, {1.0}, p, 1), 4, true);
  ASSERT_EQ(alike.scale.size(), 300u);
  EXPECT_NEAR(mean_of(alike.scale), 1.0, 1e-12);
  EXPECT_LT(sd_of(alike.scale), 0.1);
  EXPECT_NEAR(alike.observed_var, alike.noise_var, 0.25 * alike.noise_var);
  // Requests at half and 1.5 times the rejections (sd 0.5): the spread comes back, the noise out.
  const auto differ = SimAcceptance::request_spread(synth_requests(300, {0.5, 1.5}, p, 2), 4, true);
  EXPECT_NEAR(mean_of(differ.scale), 1.0, 1e-12);
  EXPECT_NEAR(sd_of(differ.scale), 0.5, 0.1);
  EXPECT_LT(sd_of(differ.scale), std::sqrt(differ.observed_var));  // the measured ŝ, shrunk
  double low = 0.0, high = 0.0;  // and each request keeps its side
  for (size_t i = 0; i < differ.scale.size(); ++i) (i % 2 ? high : low) += differ.scale[i] / 150.0;
  EXPECT_GT(high - low, 0.7);
  // Seeded: the same requests give the same scales.
  EXPECT_EQ(SimAcceptance::request_spread(synth_requests(300, {0.5, 1.5}, p, 2), 4, true).scale, differ.scale);
  EXPECT_THROW(SimAcceptance::request_spread({}, 0, true), std::invalid_argument);
  int k_max = 0;
  EXPECT_THROW(SimAcceptance::read_requests("/nonexistent/request-acceptance.json", k_max), std::runtime_error);
  EXPECT_THROW((SimAcceptance{{0.5}, "", {1.0, -0.1}}).validate(), std::invalid_argument);
  EXPECT_DOUBLE_EQ((SimAcceptance{{0.9}, "", {}}).at(0, 1.5), 0.85);
  EXPECT_DOUBLE_EQ((SimAcceptance{{0.5}, "", {}}).at(0, 3.0), 0.0);  // clamped
}

/// Steps each request took (its distinct token times after the first).
std::vector<double> steps_per_request(const RunResult& r) {
  std::vector<double> out;
  for (const auto& [id, f] : r.finished) out.push_back(static_cast<double>(std::set<double>(f.token_times_s.begin() + 1, f.token_times_s.end()).size()));
  return out;
}

TEST(SimSpeculation, EachRequestDrawsItsOwnAcceptanceWithTheMeanUnchanged) {
  const std::vector<double> p = {0.9, 0.8, 0.7};
  const RunResult alike = run_spec(spec_config(SpecMethod::ngram, p));
  SpeculativeConfig c = spec_config(SpecMethod::ngram, p);
  c.sim_acceptance->request_scale = {0.4, 1.6};
  const RunResult differ = run_spec(c);
  const Counts a = counts_of(alike), d = counts_of(differ);
  ASSERT_GT(d.drafts, 2000);
  // The first draft's rate is the mean of 1 - s (1 - p0) over requests: p0.
  const double first = static_cast<double>(d.accepted[0]) / static_cast<double>(d.drafts);
  EXPECT_NEAR(first, p[0], 4 * std::sqrt(p[0] * (1 - p[0]) / static_cast<double>(d.drafts)));
  // The mean acceptance length moves by what mixing does to products of rates (+1.9% here).
  const double len_a = static_cast<double>(a.accepted[0] + a.accepted[1] + a.accepted[2]) / static_cast<double>(a.drafts);
  const double len_d = static_cast<double>(d.accepted[0] + d.accepted[1] + d.accepted[2]) / static_cast<double>(d.drafts);
  EXPECT_NEAR(len_d / len_a, 1.019, 0.04);
  // Requests now differ: steps per request spread out (200 tokens at 2.62 or 1.71 accepted a step).
  const std::vector<double> sa = steps_per_request(alike), sd = steps_per_request(differ);
  ASSERT_EQ(sd.size(), 64u);
  EXPECT_NEAR(mean_of(sd), mean_of(sa), 0.05 * mean_of(sa));
  EXPECT_GT(sd_of(sd), 2.0 * sd_of(sa));
  for (const auto& [id, f] : differ.finished) EXPECT_EQ(f.outputs.at(0).size(), 200u) << id;
  // Without a spread the draws are those of before: the same counts as a run given none.
  SpeculativeConfig none = spec_config(SpecMethod::ngram, p);
  none.sim_acceptance->request_scale = {};
  EXPECT_EQ(counts_of(run_spec(none)).accepted, a.accepted);
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
