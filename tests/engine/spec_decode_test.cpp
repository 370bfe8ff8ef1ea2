// The step contract's new seams, on the real CPU backend with a micro random model:
// - speculative decoding: drafts verified in one step (1 + k drawn rows), accepted while the
//   draws equal them, rejected drafts' KV given back; the output equals the run without drafts,
//   greedy or sampled, for every proposer, batching shape and KV layout;
// - token masks (structured output): every draw takes an allowed token, with drafts too;
// - the prefix cache's salt.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "engine/backend/cpu_backend.h"
#include "engine/kv/paged_kv.h"
#include "engine/model/weights.h"
#include "engine/spec/draft_weights.h"
#include "engine/spec/model_proposer.h"
#include "engine/spec/ngram_proposer.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace spec_decode_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

std::shared_ptr<const ModelWeights> micro_weights() {
  static const auto w = std::make_shared<const ModelWeights>(ModelWeights::random(micro_model(), 11));
  return w;
}

std::unique_ptr<Backend> cpu(std::shared_ptr<const ModelWeights> w = micro_weights()) {
  CpuBackendOptions o;
  o.n_threads = 1;
  return std::make_unique<CpuBackend>(std::move(w), o);
}

/// A draft of the micro model's vocabulary with its own weights: one layer, another seed.
std::shared_ptr<const ModelWeights> small_draft() {
  ModelConfig c = micro_model();
  c.n_layers = 1;
  c.name = "micro-draft";
  static const auto w = std::make_shared<const ModelWeights>(ModelWeights::random(c, 12));
  return w;
}

/// The proposers that run a model: self (the target's first layer) and a separate small draft.
std::unique_ptr<Proposer> model_proposer(const std::string& method,
                                         const std::shared_ptr<const ModelWeights>& target = micro_weights()) {
  ModelProposerOptions o;
  o.kv_cache_bytes = 1 << 20;
  o.max_model_len = 128;
  if (method == "self")
    return std::make_unique<ModelProposer>("self", std::make_shared<const ModelWeights>(first_layers(*target, 1)),
                                           target->config.vocab_size, o);
  return std::make_unique<ModelProposer>("draft_model", small_draft(), target->config.vocab_size, o);
}

/// Prompts that repeat a span (what prompt lookup feeds on), and varied lengths.
std::vector<Request> workload(float temperature) {
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) {
    Request r = make_request(i, 6 + 5 * i, 10 + 3 * (i % 4));
    const std::vector<TokenId> span = prompt_tokens(7, 100 + i);
    r.prompt.insert(r.prompt.end(), span.begin(), span.end());
    r.prompt.insert(r.prompt.end(), span.begin(), span.end());
    r.sampling.temperature = temperature;
    reqs.push_back(r);
  }
  return reqs;
}

std::vector<Timed> staggered(const std::vector<Request>& reqs) {
  std::vector<Timed> out;
  for (size_t i = 0; i < reqs.size(); ++i) out.push_back({0.0003 * static_cast<double>(i), reqs[i]});
  return out;
}

/// Proposes what a reference run generated next (every draft accepted) or, with `wrong`, each
/// of those tokens + 1 (every draft rejected): verification's two ends, independent of the model.
class ScriptedProposer final : public Proposer {
 public:
  ScriptedProposer(std::map<uint64_t, std::vector<TokenId>> outputs, bool wrong)
      : outputs_(std::move(outputs)), wrong_(wrong) {}
  const char* name() const override { return "scripted"; }
  void propose(const Sequence& seq, int max_k, std::vector<TokenId>& draft) override {
    const std::vector<TokenId>& out = outputs_.at(seq.request_id);
    for (int j = 0; j < max_k && seq.n_output() + j < static_cast<int>(out.size()); ++j) {
      const TokenId t = out[size_t(seq.n_output() + j)];
      draft.push_back(wrong_ ? (t + 1) % 256 : t);
    }
  }

 private:
  std::map<uint64_t, std::vector<TokenId>> outputs_;
  bool wrong_;
};

EngineConfig config(KvKind kind, bool chunked, int budget = 256) {
  EngineConfig c = paged_config(continuous_sched(6, budget, chunked), 1 << 20);
  c.kv.kind = kind;
  c.kv.max_model_len = 128;
  return c;
}

std::map<uint64_t, std::vector<TokenId>> outputs_of(const RunResult& r) {
  std::map<uint64_t, std::vector<TokenId>> m;
  for (const auto& [id, f] : r.finished) m[id] = f.outputs.at(0);
  return m;
}

struct SpecTotals {
  int drafts = 0, draft_tokens = 0, accepted = 0;
};
SpecTotals totals(const RunResult& r) {
  SpecTotals t;
  for (const StepOutcome& s : r.steps) {
    t.drafts += s.spec_drafts;
    t.draft_tokens += s.spec_draft_tokens;
    t.accepted += s.spec_accepted_tokens;
  }
  return t;
}

TEST(NgramProposer, ProposesWhatFollowedTheLatestEarlierMatch) {
  NgramProposer p(1, 3);
  Sequence s;
  s.tokens = {5, 6, 7, 9, 5, 6, 7, 8, 4, 5, 6, 7};
  std::vector<TokenId> d;
  p.propose(s, 2, d);
  EXPECT_EQ(d, (std::vector<TokenId>{8, 4}));  // "5 6 7" last seen at 4..6, followed by 8 4
  d.clear();
  s.tokens = {1, 2, 3};
  p.propose(s, 4, d);
  EXPECT_TRUE(d.empty());
  EXPECT_THROW(NgramProposer(0, 2), std::invalid_argument);
}

class SpecEquivalence : public ::testing::TestWithParam<std::tuple<KvKind, bool, float>> {};

TEST_P(SpecEquivalence, OutputsEqualTheRunWithoutDraftsForEveryProposer) {
  const auto [kind, chunked, temperature] = GetParam();
  const std::vector<Request> reqs = workload(temperature);
  Engine plain(config(kind, chunked, chunked ? 24 : 256), cpu());
  const RunResult base = run_virtual(plain, staggered(reqs));
  const auto want = outputs_of(base);

  for (const std::string proposer : {"ngram", "right", "wrong", "self", "draft_model"}) {
    // Drafts sampled from a model's q are accepted by rejection sampling: the same distribution
    // as the run without drafts, not the same tokens (the chi-square tests below); greedy, the same.
    const bool sampled_q = proposer == "self" || proposer == "draft_model";
    if (sampled_q && temperature > 0.0f) continue;
    Engine spec(config(kind, chunked, chunked ? 24 : 256), cpu());
    if (proposer == "ngram") spec.set_proposer(std::make_unique<NgramProposer>(1, 3), 4);
    else if (sampled_q) spec.set_proposer(model_proposer(proposer), 3);
    else spec.set_proposer(std::make_unique<ScriptedProposer>(want, proposer == "wrong"), 3);
    const RunResult r = run_virtual(spec, staggered(reqs));  // checks KV invariants every step
    EXPECT_EQ(outputs_of(r), want) << proposer;
    const SpecTotals t = totals(r);
    EXPECT_GT(t.drafts, 0) << proposer;
    if (proposer == "right") {
      EXPECT_EQ(t.accepted, t.draft_tokens);
      bool several = false;  // a step that emitted more tokens than it ran sequences: drafts paid off
      for (const StepOutcome& s : r.steps) several = several || int(s.tokens.size()) > s.batch_size;
      EXPECT_TRUE(several);
    }
    if (proposer == "wrong") {
      EXPECT_EQ(t.accepted, 0);
    }
    EXPECT_EQ(spec.kv().free_slots(), spec.kv().capacity_slots()) << proposer << ": every slot given back";
    if (sampled_q) {  // the draft's own arena is given back as its sequences finish
      const auto& mp = dynamic_cast<const ModelProposer&>(*spec.proposer());
      EXPECT_EQ(mp.n_sequences(), 0);
      EXPECT_EQ(mp.kv().free_slots(), mp.kv().capacity_slots()) << proposer;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Engine, SpecEquivalence,
                         ::testing::Combine(::testing::Values(KvKind::paged, KvKind::naive), ::testing::Bool(),
                                            ::testing::Values(0.0f, 0.8f)));

/// Requests with one prompt and many seeds (sampled), short outputs.
std::vector<Request> many_seeds(int n, int max_tokens, float temperature, int vocab) {
  std::vector<Request> reqs;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.id = uint64_t(i);
    r.prompt = {3, 7, 5, 2};
    for (TokenId& t : r.prompt) t %= vocab;
    r.sampling.max_tokens = max_tokens;
    r.sampling.temperature = temperature;
    r.sampling.seed = 90000 + uint64_t(i);
    reqs.push_back(r);
  }
  return reqs;
}

/// Two-sample chi-square statistic of equally many draws: Σ (a - b)² / (a + b) over bins seen.
double chi_square_two_sample(const std::vector<int>& a, const std::vector<int>& b, int* df) {
  double x = 0.0;
  *df = -1;
  for (size_t t = 0; t < a.size(); ++t)
    if (a[t] + b[t] > 0) {
      x += double(a[t] - b[t]) * double(a[t] - b[t]) / double(a[t] + b[t]);
      ++*df;
    }
  return x;
}

TEST(SpecDecode, SampledOutputKeepsTheTargetDistributionWithModelDrafts) {
  // A 16-token model so that 1000 seeds fill every bin; its second layer damped, so that the
  // first layer (self) agrees with it often but not always: both rejection paths run.
  ModelConfig c = micro_model();
  c.vocab_size = 16;
  c.eos_token = -1;
  ModelWeights w = ModelWeights::random(c, 21);
  scale_residual_branches(w, 1, 0.5f);
  const auto target = std::make_shared<const ModelWeights>(std::move(w));
  const int n = 1000;
  const std::vector<Request> reqs = many_seeds(n, 4, 1.0f, 16);
  auto histograms = [&](bool speculate, int* accepted, int* drafted) {
    EngineConfig ec = paged_config(continuous_sched(64, 512, true), 4 << 20);
    ec.kv.max_model_len = 64;
    Engine e(ec, cpu(target));
    if (speculate) e.set_proposer(model_proposer("self", target), 2);
    const RunResult r = run_virtual(e, at_zero(reqs));
    std::vector<std::vector<int>> h(4, std::vector<int>(16, 0));
    for (const auto& [id, f] : r.finished)
      for (size_t j = 0; j < 4; ++j) ++h[j][size_t(f.outputs.at(0).at(j))];
    const SpecTotals t = totals(r);
    *accepted = t.accepted;
    *drafted = t.draft_tokens;
    return h;
  };
  int acc0, dr0, acc1, dr1;
  const auto plain = histograms(false, &acc0, &dr0);
  const auto spec = histograms(true, &acc1, &dr1);
  EXPECT_GT(dr1, n);                // tokens 2 to 4 were drafted
  EXPECT_GT(acc1, dr1 / 5);         // ... often accepted
  EXPECT_LT(acc1, dr1 - dr1 / 20);  // ... and often rejected
  for (size_t j = 1; j < 4; ++j) {  // the drafted positions
    int df = 0;
    const double x = chi_square_two_sample(plain[j], spec[j], &df);
    EXPECT_LT(x, 37.7) << "output token " << j << ", df " << df;  // df <= 15: P(chi2 > 37.7) <= 0.001
    EXPECT_NE(plain[j], spec[j]) << "the two runs drew independently";
  }
}

TEST(SpecDecode, SelfDraftAcceptanceIsSetByTheDampedLayers) {
  // The target's second layer adds scale x its residual branches: at 0 its first layer predicts
  // it exactly (every greedy draft accepted); as the scale grows the two part ways.
  std::vector<double> rates;
  for (const float scale : {0.0f, 0.5f, 1.0f}) {
    ModelWeights w = ModelWeights::random(micro_model(), 11);
    scale_residual_branches(w, 1, scale);
    const auto target = std::make_shared<const ModelWeights>(std::move(w));
    Engine e(config(KvKind::paged, true, 64), cpu(target));
    e.set_proposer(model_proposer("self", target), 3);
    const RunResult r = run_virtual(e, staggered(workload(0.0f)));
    const SpecTotals t = totals(r);
    ASSERT_GT(t.draft_tokens, 0);
    rates.push_back(double(t.accepted) / t.draft_tokens);
    std::vector<int> per_pos;
    for (const StepOutcome& s : r.steps)
      for (size_t j = 0; j < s.spec_accepted_per_pos.size(); ++j) {
        if (per_pos.size() <= j) per_pos.resize(j + 1, 0);
        per_pos[j] += s.spec_accepted_per_pos[j];
      }
    ASSERT_EQ(per_pos.size(), 3u);
    EXPECT_GE(per_pos[0], per_pos[1]);  // a later draft counts only after the earlier ones
    EXPECT_GE(per_pos[1], per_pos[2]);
  }
  EXPECT_DOUBLE_EQ(rates[0], 1.0);
  EXPECT_GT(rates[0], rates[1]);
  EXPECT_GT(rates[1], rates[2]);
}

TEST(SpecDecode, AdaptiveKShrinksForRejectedDraftsAndTheRuleCanTurnDraftsOff) {
  const std::vector<Request> reqs = workload(0.0f);
  Engine plain(config(KvKind::paged, true, 64), cpu());
  const auto want = outputs_of(run_virtual(plain, staggered(reqs)));
  // Always-wrong drafts: adaptive k falls to 1, so far fewer draft tokens than fixed k = 4.
  SpecPolicy policy;
  policy.num_speculative_tokens = 4;
  policy.adaptive = true;
  Engine adaptive(config(KvKind::paged, true, 64), cpu());
  adaptive.set_proposer(std::make_unique<ScriptedProposer>(want, true), policy);
  const RunResult ra = run_virtual(adaptive, staggered(reqs));
  Engine fixed(config(KvKind::paged, true, 64), cpu());
  fixed.set_proposer(std::make_unique<ScriptedProposer>(want, true), 4);
  const RunResult rf = run_virtual(fixed, staggered(reqs));
  EXPECT_EQ(outputs_of(ra), want);
  EXPECT_LT(totals(ra).draft_tokens * 2, totals(rf).draft_tokens);
  EXPECT_GT(totals(ra).drafts, totals(rf).drafts / 2);  // still drafting, one token at a time
  // Priced on a device where every row costs its FLOPs (compute-bound at any batch), drafts with
  // no acceptance history never pay: no step proposes, the output is unchanged.
  SimDevice compute_bound = SimDevice::preset("h100");
  compute_bound.mem_bw_bytes_s = 1e18;
  compute_bound.step_overhead_s = 0.0;
  policy.pricing = SpecPricing{SimCostModel::roofline(compute_bound), micro_model(), std::nullopt};
  Engine off(config(KvKind::paged, true, 64), cpu());
  off.set_proposer(std::make_unique<ScriptedProposer>(want, false), policy);
  const RunResult ro = run_virtual(off, staggered(reqs));
  EXPECT_EQ(outputs_of(ro), want);
  EXPECT_EQ(totals(ro).drafts, 0);
  int n_off = 0;
  for (const StepOutcome& s : ro.steps) n_off += s.spec_off;
  EXPECT_GT(n_off, 0);
}

TEST(SpecDecode, ModelProposersCheckTheirDraft) {
  ModelConfig other = micro_model();
  other.vocab_size = 128;
  auto w = std::make_shared<const ModelWeights>(ModelWeights::random(other, 3));
  EXPECT_THROW(ModelProposer("draft_model", w, 256), std::invalid_argument);
  EXPECT_THROW(first_layers(*micro_weights(), 3), std::invalid_argument);
  EXPECT_THROW(first_layers(*micro_weights(), 0), std::invalid_argument);
}

TEST(SpecDecode, OnlyContinuousBatchingTakesAProposer) {
  EngineConfig c = paged_config(static_sched(4, 1.0), 1 << 20);
  Engine e(c, cpu());
  EXPECT_THROW(e.set_proposer(std::make_unique<NgramProposer>(1, 2), 2), std::invalid_argument);
}

/// Allows only tokens t with t % modulus == residue, and checks every emitted token.
class ModuloConstraint final : public TokenConstraint {
 public:
  ModuloConstraint(int vocab, int modulus, int residue) : vocab_(vocab), modulus_(modulus), residue_(residue) {}
  void fill_mask(std::span<const TokenId> draft, uint32_t* words) override {
    for (TokenId t : draft) EXPECT_EQ(t % modulus_, residue_) << "a draft outside the grammar reached a mask";
    for (int w = 0; w < (vocab_ + 31) / 32; ++w) words[w] = 0;
    for (int t = residue_; t < vocab_; t += modulus_) words[t / 32] |= 1u << (t % 32);
    ++fills;
  }
  void accept(TokenId t) override {
    EXPECT_EQ(t % modulus_, residue_);
    ++accepted;
  }
  int fills = 0, accepted = 0;

 private:
  int vocab_, modulus_, residue_;
};

TEST(TokenMasks, EveryDrawTakesAnAllowedTokenOnTheCpuAndTheSim) {
  for (const bool sim : {false, true}) {
    for (const bool with_drafts : {false, true}) {
      Engine e(config(KvKind::paged, true, 32), sim ? sim_backend() : cpu());
      if (with_drafts) e.set_proposer(std::make_unique<NgramProposer>(1, 3), 3);
      std::vector<Request> reqs = workload(0.7f);
      std::vector<std::shared_ptr<ModuloConstraint>> cs;
      for (size_t i = 0; i < reqs.size(); i += 2) {  // every other request constrained
        cs.push_back(std::make_shared<ModuloConstraint>(256, 3, int(i % 3)));
        reqs[i].constraint = cs.back();
      }
      const RunResult r = run_virtual(e, staggered(reqs));
      for (size_t i = 0; i < reqs.size(); i += 2) {
        const auto& out = r.at(reqs[i].id).outputs.at(0);
        ASSERT_EQ(int(out.size()), reqs[i].sampling.max_tokens);
        for (TokenId t : out) EXPECT_EQ(t % 3, int(i % 3)) << (sim ? "sim" : "cpu") << " request " << i;
        EXPECT_EQ(cs[i / 2]->accepted, int(out.size()));
      }
    }
  }
}

TEST(TokenMasks, ConstrainedParallelSamplesAreRejected) {
  Engine e(config(KvKind::paged, false), cpu());
  Request r = make_request(1, 8, 4);
  r.sampling.n = 2;
  r.constraint = std::make_shared<ModuloConstraint>(256, 2, 0);
  const auto f = e.add(r, 0.0);
  ASSERT_TRUE(f.has_value());
  EXPECT_NE(f->error.find("n = 1"), std::string::npos) << f->error;
}

TEST(PrefixCacheSalt, KvComputedUnderOneSaltIsNeverFoundUnderAnother) {
  KvConfig kc;
  kc.block_size = 4;
  PagedKvManager kv(kc, 64);
  auto seq = [](uint64_t id, uint64_t salt) {
    Sequence s;
    s.id = id;
    s.tokens = prompt_tokens(13, 5);
    s.n_prompt = 13;
    s.sampling.max_tokens = 2;
    s.cache_salt = salt;
    return s;
  };
  Sequence a = seq(1, 7);
  kv.allocate(a, 13);
  a.n_computed = 13;
  kv.on_computed(a);
  Sequence same = seq(2, 7), other = seq(3, 8);
  kv.allocate(same, 13);
  kv.allocate(other, 13);
  EXPECT_EQ(same.kv.n_cached_prefix, 12);   // three full blocks reused
  EXPECT_EQ(other.kv.n_cached_prefix, 0);   // another adapter: nothing shared
}

TEST(KvTruncate, GivesBackWholeBlocksPastTheKeptPositionsAndKeepsSharedOnes) {
  KvConfig kc;
  kc.block_size = 4;
  kc.prefix_caching = false;
  PagedKvManager kv(kc, 64);
  Sequence s;
  s.id = 1;
  s.tokens = prompt_tokens(6, 1);
  s.n_prompt = 6;
  s.sampling.max_tokens = 20;
  ASSERT_TRUE(kv.allocate_slots(s, 6, 7));  // 6 positions + 7 lookahead = 13: 4 blocks
  EXPECT_EQ(s.kv.blocks.size(), 4u);
  s.n_computed = 6;
  Sequence child;
  child.id = 2;
  child.tokens = s.tokens;
  child.n_prompt = 6;
  child.sampling.max_tokens = 20;
  kv.fork(s, child);
  const int32_t second = s.kv.blocks[1];
  const int64_t free_before = kv.free_slots();
  kv.truncate(s, 7);  // keeps 2 blocks; blocks 3 and 4 are shared with the child: only s's refs go
  EXPECT_EQ(s.kv.blocks.size(), 2u);
  EXPECT_EQ(kv.free_slots(), free_before);
  EXPECT_EQ(kv.ref_count(second), 2);
  kv.release(child);
  kv.truncate(s, 6);
  EXPECT_EQ(s.kv.blocks.size(), 2u);
  EXPECT_THROW(kv.truncate(s, 5), std::logic_error);  // below what it computed
  std::vector<const Sequence*> live = {&s};
  EXPECT_NO_THROW(kv.check_invariants(live));
  kv.release(s);
  EXPECT_EQ(kv.free_slots(), kv.capacity_slots());
}

}  // namespace spec_decode_test
}  // namespace servelab
