// Structured output in the engine (issue 30, item 3), on the real CPU backend with the micro
// random model and a byte tokenizer, masks from the grammar engine:
// - masks filled late (Step::fill_masks, called by the backend after the forward) give the same
//   tokens as masks filled before the step, greedy and sampled, with and without drafts, and
//   every finished output is valid against its schema;
// - a step without a constrained draw carries no filler; a filler that throws is the step's error;
// - jump-forward appends the tokens a schema forces (its fixed keys) without a forward: outputs
//   stay valid and the run takes fewer steps.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/json_schema_check.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/forwarding_backend.h"
#include "engine/grammar/grammar_constraint.h"
#include "engine/model/tokenizer.h"
#include "engine/model/weights.h"
#include "engine/spec/ngram_proposer.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace structured_overlap_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

std::shared_ptr<const ModelWeights> weights() {
  static const auto w = std::make_shared<const ModelWeights>(ModelWeights::random(micro_model(), 21));
  return w;
}

std::unique_ptr<Backend> cpu() {
  CpuBackendOptions o;
  o.n_threads = 1;
  return std::make_unique<CpuBackend>(weights(), o);
}

/// Long fixed keys (all required, in order), small bounded values: the grammar forces every key.
const char* kLongKeys = R"({"type": "object", "properties": {
  "customer_identification_number": {"type": "integer", "minimum": 0, "maximum": 999},
  "preferred_contact_channel": {"enum": ["email", "phone", "letter"]},
  "is_account_verified_by_support": {"type": "boolean"},
  "short_note": {"type": "string", "maxLength": 4}},
  "required": ["customer_identification_number", "preferred_contact_channel",
               "is_account_verified_by_support", "short_note"],
  "additionalProperties": false})";

const char* kSmall = R"({"type": "object", "properties": {
  "id": {"type": "integer", "minimum": 0, "maximum": 99},
  "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3},
  "ok": {"type": "boolean"}}, "required": ["id", "ok"], "additionalProperties": false})";

struct Grammars {
  Grammars() : tokenizer(make_byte_tokenizer(256, micro_model().eos_token)), compiler(*tokenizer, 256) {}
  std::shared_ptr<TokenConstraint> make(const char* schema) {
    grammar::ConstraintSpec spec;
    spec.kind = grammar::ConstraintKind::json_schema;
    spec.source = schema;
    return compiler.make(spec);
  }
  std::unique_ptr<Tokenizer> tokenizer;
  grammar::ConstraintCompiler compiler;
};

Grammars& grammars() {
  static Grammars g;
  return g;
}

/// Eight requests, every other one constrained (or all of them), ending at eos; schemas
/// kLongKeys for i % 4 == 0, else kSmall.
std::vector<Request> workload(float temperature, bool all_constrained = false) {
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) {
    Request r = make_request(i, 5 + 3 * i, 220);
    r.sampling.temperature = temperature;
    r.sampling.ignore_eos = false;
    if (all_constrained || i % 2 == 0) r.constraint = grammars().make(i % 4 == 0 ? kLongKeys : kSmall);
    reqs.push_back(r);
  }
  return reqs;
}

EngineConfig config(bool overlap, bool jump = false) {
  EngineConfig c = paged_config(continuous_sched(6, 64, true), 1 << 20);
  c.kv.max_model_len = 256;
  c.structured_output.overlap_masks = overlap;
  c.structured_output.jump_forward = jump;
  return c;
}

std::map<uint64_t, std::vector<TokenId>> outputs_of(const RunResult& r) {
  std::map<uint64_t, std::vector<TokenId>> m;
  for (const auto& [id, f] : r.finished) m[id] = f.outputs.at(0);
  return m;
}

/// Every constrained request ended at eos with text valid against its schema.
void expect_valid(const RunResult& r, const std::vector<Request>& reqs, const std::string& what) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!reqs[i].constraint) continue;
    std::vector<TokenId> out = r.at(reqs[i].id).outputs.at(0);
    ASSERT_FALSE(out.empty()) << what;
    ASSERT_EQ(out.back(), micro_model().eos_token) << what << ": request " << i << " did not finish its JSON";
    out.pop_back();
    const std::string text = grammars().tokenizer->decode(out);
    const auto schema = nlohmann::ordered_json::parse(i % 4 == 0 ? kLongKeys : kSmall);
    EXPECT_EQ(analysis::validate_json_text(text, schema), "") << what << ": " << text;
  }
}

/// Records whether each step carried late masks and a filler (and forwards the step).
class StepTap final : public ForwardingBackend {
 public:
  explicit StepTap(std::unique_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}
  StepOutput execute(const Step& step) override {
    bool constrained = false;
    for (int32_t m : step.in.mask_index) constrained |= m >= 0;
    steps.push_back({constrained, step.in.late_masks, bool(step.fill_masks), step.in.mask_words.size()});
    return inner().execute(step);
  }
  struct Seen {
    bool constrained;
    int late_masks;
    bool filler;
    size_t eager_words;
  };
  std::vector<Seen> steps;
};

TEST(LateMasks, SameTokensAsMasksBeforeTheStepGreedySampledAndWithDrafts) {
  for (const float temperature : {0.0f, 0.8f}) {
    for (const bool drafts : {false, true}) {
      const std::string what = "temperature " + std::to_string(temperature) + (drafts ? ", drafts" : "");
      std::vector<Request> reqs = workload(temperature);
      Engine before(config(false), cpu());
      if (drafts) before.set_proposer(std::make_unique<NgramProposer>(1, 3), 3);
      const RunResult rb = run_virtual(before, at_zero(reqs));
      reqs = workload(temperature);  // fresh constraints
      auto tap = std::make_unique<StepTap>(cpu());
      StepTap* seen = tap.get();
      Engine overlapped(config(true), std::move(tap));
      if (drafts) overlapped.set_proposer(std::make_unique<NgramProposer>(1, 3), 3);
      const RunResult ro = run_virtual(overlapped, at_zero(reqs));
      EXPECT_EQ(outputs_of(ro), outputs_of(rb)) << what;
      expect_valid(ro, reqs, what);
      int masked_steps = 0;
      double mask_s = 0;
      for (const StepOutcome& s : ro.steps) {
        masked_steps += s.n_masks > 0;
        mask_s += s.mask_s;
      }
      EXPECT_GT(masked_steps, 0) << what;
      EXPECT_GT(mask_s, 0.0) << what;
      for (const StepTap::Seen& s : seen->steps) {
        EXPECT_EQ(s.eager_words, 0u) << what;  // never filled before the step
        EXPECT_EQ(s.filler, s.late_masks > 0) << what;
        EXPECT_EQ(s.constrained, s.late_masks > 0) << what;
      }
    }
  }
}

TEST(LateMasks, StepsWithoutConstrainedDrawsCarryNoFiller) {
  std::vector<Request> reqs = workload(0.0f);
  for (Request& r : reqs) r.constraint = nullptr;
  auto tap = std::make_unique<StepTap>(cpu());
  StepTap* seen = tap.get();
  Engine e(config(true), std::move(tap));
  run_virtual(e, at_zero(reqs));
  ASSERT_FALSE(seen->steps.empty());
  for (const StepTap::Seen& s : seen->steps) {
    EXPECT_FALSE(s.filler);
    EXPECT_EQ(s.late_masks, 0);
  }
}

/// A constraint whose mask fails (a grammar bug, an allocation failure).
class ThrowingConstraint final : public TokenConstraint {
 public:
  void fill_mask(std::span<const TokenId>, uint32_t*) override { throw std::runtime_error("mask failed on purpose"); }
  void accept(TokenId) override {}
};

TEST(LateMasks, AFillerThatThrowsIsTheStepsError) {
  for (const bool sim : {false, true}) {
    for (const bool overlap : {false, true}) {
      Engine e(config(overlap), sim ? sim_backend() : cpu());
      Request r = make_request(1, 6, 4);
      r.constraint = std::make_shared<ThrowingConstraint>();
      ASSERT_FALSE(e.add(r, 0.0).has_value());
      try {
        for (double t = 0; e.has_work() && t < 10; t += 1) e.step(t);
        ADD_FAILURE() << "the step did not fail (sim " << sim << ", overlap " << overlap << ")";
      } catch (const std::runtime_error& ex) {
        EXPECT_NE(std::string(ex.what()).find("on purpose"), std::string::npos) << ex.what();
      }
    }
  }
}

TEST(LateMasks, BackendsRefuseLateMasksWithoutAFiller) {
  Step step;
  auto backend = cpu();
  backend->init_kv(64);
  step.in.token_ids = {5};
  step.in.positions = {0};
  step.in.slot_mapping = {0};
  step.in.query_start = {0, 1};
  step.in.context_lens = {1};
  step.in.seq_ids = {1};
  step.in.block_table_stride = 1;
  step.in.block_tables = {0};
  step.in.sample_rows = {0};
  step.in.temperature = {0};
  step.in.top_k = {0};
  step.in.top_p = {1};
  step.in.seed = {0};
  step.in.seq_key = {0};
  step.in.sample_position = {1};
  step.in.mask_index = {0};
  step.in.draft_token = {-1};
  step.in.draft_dist = {-1};
  step.in.mask_words_per_row = 8;
  step.in.late_masks = 1;
  EXPECT_THROW(backend->execute(step), std::invalid_argument);
  // With a filler that allows token 7 only, the draw takes it.
  step.fill_masks = [](uint32_t* words) {
    for (int w = 0; w < 8; ++w) words[w] = 0;
    words[0] = 1u << 7;
  };
  EXPECT_EQ(backend->execute(step).tokens, std::vector<TokenId>{7});
}

TEST(JumpForward, FixedKeysAreAppendedWithoutAForwardAndOutputsStayValid) {
  for (const bool all : {true, false}) {
    std::vector<Request> reqs = workload(0.0f, all);
    Engine plain(config(true), cpu());
    const RunResult rp = run_virtual(plain, at_zero(reqs));
    reqs = workload(0.0f, all);
    Engine jumping(config(true, true), cpu());
    const RunResult rj = run_virtual(jumping, at_zero(reqs));
    expect_valid(rp, reqs, "plain");
    expect_valid(rj, reqs, "jump-forward");
    int jumped = 0;
    for (const StepOutcome& s : rj.steps) jumped += s.n_jump_forward_tokens;
    EXPECT_EQ(rp.steps.front().n_jump_forward_tokens, 0);
    if (all) {
      // Two requests of the long-keys schema force over 100 key bytes each (byte tokens); every
      // request is constrained, so the run ends when the JSON does: far fewer steps.
      EXPECT_GT(jumped, 2 * 100);
      EXPECT_LT(2 * rj.steps.size(), rp.steps.size()) << rj.steps.size() << " steps against " << rp.steps.size();
    } else {
      for (size_t i = 1; i < reqs.size(); i += 2)  // unconstrained requests are untouched
        EXPECT_EQ(rj.at(reqs[i].id).outputs, rp.at(reqs[i].id).outputs);
    }
  }
}

TEST(JumpForward, WorksWithDraftsAndNeedsContinuousBatching) {
  std::vector<Request> reqs = workload(0.0f);
  Engine e(config(true, true), cpu());
  e.set_proposer(std::make_unique<NgramProposer>(1, 3), 3);
  const RunResult r = run_virtual(e, at_zero(reqs));
  expect_valid(r, reqs, "jump-forward with drafts");
  EngineConfig bad = paged_config(static_sched(4, 1.0), 1 << 20);
  bad.structured_output.jump_forward = true;
  EXPECT_THROW(Engine(bad, cpu()), std::invalid_argument);
}

}  // namespace structured_overlap_test
}  // namespace servelab
