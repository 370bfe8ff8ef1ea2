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
#include "engine/spec/ngram_proposer.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace spec_decode_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

std::unique_ptr<Backend> cpu() {
  static const auto w = std::make_shared<const ModelWeights>(ModelWeights::random(micro_model(), 11));
  CpuBackendOptions o;
  o.n_threads = 1;
  return std::make_unique<CpuBackend>(w, o);
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

  for (const std::string proposer : {"ngram", "right", "wrong"}) {
    Engine spec(config(kind, chunked, chunked ? 24 : 256), cpu());
    if (proposer == "ngram") spec.set_proposer(std::make_unique<NgramProposer>(1, 3), 4);
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
    if (proposer == "wrong") EXPECT_EQ(t.accepted, 0);
    EXPECT_EQ(spec.kv().free_slots(), spec.kv().capacity_slots()) << proposer << ": every slot given back";
  }
}

INSTANTIATE_TEST_SUITE_P(Engine, SpecEquivalence,
                         ::testing::Combine(::testing::Values(KvKind::paged, KvKind::naive), ::testing::Bool(),
                                            ::testing::Values(0.0f, 0.8f)));

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
