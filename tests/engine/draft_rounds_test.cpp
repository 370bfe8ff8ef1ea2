// Whole proposer rounds of a model draft (engine/spec/draft_rounds.h), timed on the CPU engine,
// written into a profile's "draft", and priced back by DraftPricer::round_seconds: the proposer's
// work beside the draft's forward steps, interpolated over the batch and the prompt rows caught up.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/draft_pricer.h"
#include "engine/backend/profiler.h"
#include "engine/backend/sim_backend.h"
#include "engine/spec/draft_rounds.h"
#include "engine/spec/model_proposer.h"
#include "engine/spec/sim_proposer.h"

namespace servelab {
namespace draft_rounds_test {  // named, not anonymous: a unity batch shares one translation unit

/// hidden 64, 2 layers, 4 heads of 16 (2 K/V heads), ffn 128, vocab 97, f32: fast on one thread.
ModelConfig rounds_target_config() {
  ModelConfig c;
  c.name = "test-rounds";
  c.hidden_size = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.intermediate_size = 128;
  c.vocab_size = 97;
  c.max_position = 512;
  c.dtype = DType::f32;
  return c;
}

ProfileOptions draft_grid() {
  ProfileOptions o;
  o.prefill_lens = {4, 8};
  o.batch_sizes = {1, 3};
  o.contexts = {6, 12};
  o.prompt_lens = {6};
  o.chunk_lens = {3, 5};
  o.repeats = 1;
  return o;
}

DraftRoundOptions round_options() {
  DraftRoundOptions r;
  r.batch_sizes = {1, 3};
  r.ks = {2};
  r.context = 12;
  r.prompt_lens = {6};
  r.warmup = 1;
  r.repeats = 3;
  return r;
}

/// A target profile with a one-layer draft's grid and, when `rounds`, its timed proposer rounds.
struct Profiled {
  ModelConfig target = rounds_target_config(), draft;
  std::string text;
  ProfileReport report, draft_report;
};

/// A step time that grows with every row and every key read, as measured ones do on a quiet
/// machine: for tests whose claim is an ordering of prices, not a measured figure.
void rows_and_keys_times(ProfileReport& r) {
  for (ProfileSample& s : r.samples) {
    s.step_s = 1e-4 + 2e-6 * double(s.shape.n_rows()) + 1e-9 * s.shape.attention_pairs;
    s.times_s.assign(s.times_s.size(), s.step_s);
  }
}

/// rounds: the draft's rounds timed too; ordered_times: the samples' measured times replaced by
/// rows_and_keys_times (a loaded machine, CI's sanitizer run among them, can time a bigger step
/// below a smaller one).
Profiled profile(bool rounds, bool ordered_times = false) {
  Profiled p;
  p.draft = p.target;
  p.draft.n_layers = 1;
  CpuBackend target(ModelWeights::random(p.target, 1), CpuBackendOptions{.n_threads = 1});
  p.report = profile_backend(target, draft_grid());
  auto weights = std::make_shared<const ModelWeights>(ModelWeights::random(p.draft, 1));
  CpuBackend draft(weights, CpuBackendOptions{.n_threads = 1});
  p.draft_report = profile_backend(draft, draft_grid());
  if (ordered_times) {
    rows_and_keys_times(p.report);
    rows_and_keys_times(p.draft_report);
  }
  if (rounds) {
    ModelProposer proposer("self", weights, p.draft.vocab_size);
    p.draft_report.rounds = profile_draft_rounds(proposer, p.draft.vocab_size, round_options());
    EXPECT_EQ(proposer.n_sequences(), 0) << "the timed sequences are forgotten";
  }
  p.report.hardware = p.draft_report.hardware = "cpu-2core";
  p.text = profile_json(p.report, &p.draft_report);
  return p;
}

SimCostModel load(const Profiled& p, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / "servelab_draft_rounds_test.json";
  std::ofstream(path) << text;
  SimCostModel cost = SimCostModel::from_profile_json(path.string(), p.report.model);
  std::filesystem::remove(path);
  return cost;
}

TEST(DraftRounds, SteadyAndFirstRoundsAreTimedForEveryBatch) {
  const Profiled p = profile(true);
  const std::vector<DraftRound>& r = p.draft_report.rounds;
  ASSERT_EQ(r.size(), 4u);  // steady at batches {1, 3}, then first rounds of 6-token prompts at {1, 3}
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r[i].n_seqs, i == 0 ? 1 : 3);
    EXPECT_EQ(r[i].k, 2);
    EXPECT_EQ(r[i].catchup_rows, 2) << "every draft accepted: the last draft and the bonus token";
    EXPECT_GT(r[i].context, 12) << "the rounds' sequences grow by the accepted drafts";
    EXPECT_GT(r[i].round_s, 0.0);
  }
  for (size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(r[i].catchup_rows, 7) << "a first round catches up the prompt and the first token";
    EXPECT_EQ(r[i].context, 7);
    EXPECT_GT(r[i].round_s, 0.0);
  }
  const auto j = nlohmann::json::parse(p.text);
  ASSERT_EQ(j.at("draft").at("rounds").size(), 4u);
  EXPECT_EQ(j.at("draft").at("rounds")[2].at("catchup_rows"), 7);
}

TEST(DraftRounds, TheSimPricesEachProfiledRoundAtItsMeasuredTime) {
  const Profiled p = profile(true);
  const SimCostModel cost = load(p, p.text);
  ASSERT_EQ(cost.draft_profiles.size(), 1u);
  ASSERT_EQ(cost.draft_profiles[0].rounds.size(), 4u);
  const DraftPricer pricer(cost, p.target, p.draft);
  ASSERT_TRUE(pricer.draft_profiled());
  ASSERT_TRUE(pricer.rounds_profiled());
  for (const DraftRound& r : cost.draft_profiles[0].rounds) {
    const auto steps = draft_round_shapes(r.n_seqs, r.k, r.context, r.catchup_rows);
    const int64_t prompt_rows = r.catchup_rows > 2 ? int64_t(r.n_seqs) * r.catchup_rows : 0;
    double forward = 0.0;
    for (const StepShape& s : steps) forward += pricer.seconds(s);
    // The work is what the round took over its priced forward steps, never below 0: the round is
    // priced at its measured time, or at its forward steps where it measured below them.
    const double work = r.k * pricer.step_work_s(r.n_seqs) + pricer.prompt_work_s(prompt_rows);
    EXPECT_GE(pricer.step_work_s(r.n_seqs), 0.0);
    EXPECT_GE(pricer.prompt_work_s(prompt_rows), 0.0);
    EXPECT_NEAR(pricer.round_seconds(steps, prompt_rows), forward + work, 1e-12);
    if (r.catchup_rows == 2) {
      EXPECT_NEAR(pricer.round_seconds(steps, 0), std::max(forward, r.round_s), 1e-12) << r.n_seqs << " seqs";
    }
  }
  // Between profiled batches the work per step is interpolated; at 0 sequences it is 0, beyond
  // the last batch it grows in proportion.
  EXPECT_NEAR(pricer.step_work_s(2), 0.5 * (pricer.step_work_s(1) + pricer.step_work_s(3)), 1e-15);
  EXPECT_EQ(pricer.step_work_s(0), 0.0);
  EXPECT_NEAR(pricer.step_work_s(6), 2.0 * pricer.step_work_s(3), 1e-15);
  EXPECT_EQ(pricer.prompt_work_s(0), 0.0);
}

TEST(DraftRounds, WithoutRoundsDraftingIsItsForwardStepsAndOldProfilesLoad) {
  const Profiled p = profile(false);
  const SimCostModel cost = load(p, p.text);
  ASSERT_EQ(cost.draft_profiles.size(), 1u);
  EXPECT_TRUE(cost.draft_profiles[0].rounds.empty());
  const DraftPricer pricer(cost, p.target, p.draft);
  EXPECT_TRUE(pricer.draft_profiled());
  EXPECT_FALSE(pricer.rounds_profiled());
  const auto steps = draft_round_shapes(3, 4, 40, 2);
  double forward = 0.0;
  for (const StepShape& s : steps) forward += pricer.seconds(s);
  EXPECT_DOUBLE_EQ(pricer.round_seconds(steps, 0), forward);
  EXPECT_DOUBLE_EQ(pricer.round_seconds(steps, 500), forward);
}

TEST(DraftRounds, ABadRoundIsRefusedNamingIt) {
  const Profiled p = profile(false);
  auto j = nlohmann::json::parse(p.text);
  j["draft"]["rounds"] = nlohmann::json::array({{{"n_seqs", 2}, {"k", 3}, {"context", 40}, {"catchup_rows", 2}, {"round_s", -1.0}}});
  try {
    load(p, j.dump());
    ADD_FAILURE() << "a negative round time was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("draft.rounds[0]"), std::string::npos) << e.what();
  }
  j["draft"]["rounds"] = nlohmann::json::array({{{"n_seqs", 2}, {"k", 3}, {"context", 40}}});
  EXPECT_THROW(load(p, j.dump()), std::runtime_error);
}

TEST(DraftRounds, TheSimProposerChargesTheMeasuredWork) {
  // Rounds measured at 2 ms over their forward steps: a steady round of the sim proposer costs
  // that much more than the same round without them.
  const Profiled p = profile(false);
  auto j = nlohmann::json::parse(p.text);
  const SimCostModel plain = load(p, p.text);
  const DraftPricer base(plain, p.target, p.draft);
  nlohmann::json rounds = nlohmann::json::array();
  for (int b : {1, 3}) {
    double forward = 0.0;
    for (const StepShape& s : draft_round_shapes(b, 2, 20, 2)) forward += base.seconds(s);
    rounds.push_back({{"n_seqs", b}, {"k", 2}, {"context", 20}, {"catchup_rows", 2}, {"round_s", forward + 2e-3}});
  }
  j["draft"]["rounds"] = rounds;
  const SimCostModel with = load(p, j.dump());
  const DraftPricer pricer(with, p.target, p.draft);
  EXPECT_NEAR(pricer.step_work_s(1), 1e-3, 1e-12);  // 2 ms over a round of k = 2 steps
  EXPECT_NEAR(pricer.step_work_s(3), 1e-3, 1e-12);

  auto priced = [&](const SimCostModel& cost) {
    SimBackend sim(p.target, cost);
    SimProposer proposer(SpecMethod::self, sim, p.draft);
    Sequence s;
    s.id = 7;
    s.tokens.assign(20, 3);
    s.status = SeqStatus::running;
    std::vector<TokenId> draft;
    proposer.propose(s, 2, draft);  // the first round: its prompt caught up
    s.tokens.insert(s.tokens.end(), draft.begin(), draft.end());
    s.tokens.push_back(5);  // every draft accepted and a bonus token: 2 rows to catch up
    draft.clear();
    proposer.propose(s, 2, draft);
    return *proposer.priced_seconds();
  };
  EXPECT_NEAR(priced(with) - priced(plain), 2e-3, 1e-9);
}

TEST(DraftRounds, TheCatchUpBeyondASteadyRoundIsToldApart) {
  // A first round catches up a 20-token prompt: most of its first step is the one-off catch-up;
  // the next round, after every draft was accepted, catches up the steady 2 rows and has none.
  // The sim's prices come from step times ordered by rows (a timed profile on a loaded machine
  // once priced the 20-row catch-up no higher than the steady round: first == 0).
  const Profiled p = profile(false, true);
  const SimCostModel cost = load(p, p.text);
  SimBackend sim(p.target, cost);
  SimProposer priced(SpecMethod::self, sim, p.draft);
  ModelProposer timed("self", std::make_shared<const ModelWeights>(ModelWeights::random(p.draft, 1)), p.draft.vocab_size);
  for (Proposer* proposer : std::initializer_list<Proposer*>{&priced, &timed}) {
    SCOPED_TRACE(proposer == &priced ? "sim" : "cpu");
    Sequence s;
    s.id = 3;
    s.tokens.assign(20, 4);
    s.status = SeqStatus::running;
    std::vector<TokenId> draft;
    proposer->propose(s, 2, draft);
    const double first = proposer->catch_up_excess_s();
    EXPECT_GT(first, 0.0);
    if (proposer == &priced) {
      EXPECT_LT(first, *priced.priced_seconds()) << "the draft steps stay";
    }
    s.tokens.insert(s.tokens.end(), draft.begin(), draft.end());
    s.tokens.push_back(5);
    draft.clear();
    proposer->propose(s, 2, draft);
    EXPECT_EQ(proposer->catch_up_excess_s(), 0.0) << "a steady round";
  }
}

}  // namespace draft_rounds_test
}  // namespace servelab
