// Shape-only steps (Step::shape_only, BackendCaps::reads_rows): the engine sends the sim backend
// only the step's shape and draws, and the sim prices and draws exactly as from the full step.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "engine/backend/cost_model.h"
#include "engine/backend/hardware.h"
#include "engine/backend/make_backend.h"
#include "engine/backend/sim_backend.h"
#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace sim_shape_step_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

std::unique_ptr<SimBackend> make_sim() {
  auto b = std::make_unique<SimBackend>(preset("llama2-7b"), SimCostModel::roofline(SimDevice::preset("h100")));
  b->init_kv(4096);
  return b;
}

TEST(SimShapeStep, PricesAndDrawsAsTheFullStep) {
  const std::unique_ptr<SimBackend> full_owner = make_sim(), shape_owner = make_sim();
  SimBackend &full = *full_owner, &shape = *shape_owner;
  EXPECT_FALSE(shape.caps().reads_rows);
  KvConfig kc;
  kc.block_size = 16;
  auto kv = make_kv_manager(kc, 4096);
  // A prefill chunk that does not draw, a whole prompt that draws 3 parallel samples, and a
  // decode further on: different row counts, contexts and draws in one step.
  std::vector<Sequence> seqs(3);
  const int lengths[] = {90, 37, 61};
  for (int i = 0; i < 3; ++i) {
    seqs[i].id = uint64_t(i) + 1;
    seqs[i].tokens = prompt_tokens(lengths[i], uint64_t(i));
    seqs[i].n_prompt = seqs[i].n_tokens();
    seqs[i].sampling.seed = 100 + uint64_t(i);
    seqs[i].sampling.max_tokens = 8;
    kv->allocate(seqs[i], seqs[i].n_tokens());
  }
  seqs[2].n_computed = 60;
  Batch batch;
  batch.entries.push_back({&seqs[0], 40, false});
  batch.entries.push_back({&seqs[1], 37, true, 3});
  batch.entries.push_back({&seqs[2], 1, true});
  Step a, b;
  build_step_input(batch, *kv, full.config().vocab_size, a, StepDetail::full);
  build_step_input(batch, *kv, shape.config().vocab_size, b, StepDetail::shape);
  EXPECT_FALSE(a.shape_only);
  ASSERT_TRUE(b.shape_only);
  EXPECT_TRUE(b.in.token_ids.empty());
  EXPECT_TRUE(b.in.slot_mapping.empty());
  EXPECT_TRUE(b.in.block_tables.empty());
  EXPECT_EQ(b.in.query_start, a.in.query_start);
  EXPECT_EQ(b.in.context_lens, a.in.context_lens);
  EXPECT_EQ(b.in.sample_rows, a.in.sample_rows);
  const StepOutput ra = full.execute(a), rb = shape.execute(b);
  EXPECT_EQ(rb.tokens, ra.tokens);
  ASSERT_EQ(rb.tokens.size(), 4u);
  ASSERT_TRUE(ra.predicted_s && rb.predicted_s);
  EXPECT_EQ(*rb.predicted_s, *ra.predicted_s);
}

TEST(SimShapeStep, AMalformedShapeIsRejectedNamingTheField) {
  const std::unique_ptr<SimBackend> owner = make_sim();
  SimBackend& sim = *owner;
  KvConfig kc;
  auto kv = make_kv_manager(kc, 4096);
  Sequence s;
  s.id = 1;
  s.tokens = prompt_tokens(20, 1);
  s.n_prompt = 20;
  kv->allocate(s, 20);
  Batch batch;
  batch.entries.push_back({&s, 20, true});
  Step step;
  build_step_input(batch, *kv, sim.config().vocab_size, step, StepDetail::shape);
  EXPECT_NO_THROW(sim.execute(step));
  step.in.sample_rows[0] = 20;  // past the step's 20 rows
  try {
    sim.execute(step);
    FAIL() << "a draw past the step's rows must be rejected";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sample_rows[0]"), std::string::npos) << e.what();
  }
  step.in.sample_rows[0] = 19;
  step.in.context_lens[0] = 5;  // fewer than its 20 query rows
  EXPECT_THROW(sim.execute(step), std::invalid_argument);
}

// The engine builds a shape-only step entry by entry (ShapeStepBuilder), most entries through its
// decode path: every array must be what the full step's build (check_entry, write_draws) gives.
TEST(SimShapeStep, TheBuilderWritesWhatTheFullStepHolds) {
  const std::unique_ptr<SimBackend> owner = make_sim();
  const int vocab = owner->config().vocab_size;
  KvConfig kc;
  kc.block_size = 16;
  auto kv = make_kv_manager(kc, 4096);
  // Decodes (greedy, sampled, top_k 1, a second sample), one verifying two drafts, a prefill
  // chunk that does not draw and a whole prompt drawing two samples, in an awkward order.
  std::vector<Sequence> seqs(7);
  for (int i = 0; i < 7; ++i) {
    Sequence& s = seqs[size_t(i)];
    s.id = uint64_t(i) + 11;
    s.tokens = prompt_tokens(17 + 9 * i, uint64_t(i) + 5);
    s.n_prompt = s.n_tokens();
    s.sampling.seed = 700 + uint64_t(i);
    s.sampling.max_tokens = 40;
    s.sampling.temperature = i % 2 ? 0.7f : 0.0f;
    s.sampling.top_k = i == 3 ? 1 : 20 * i;
    s.sampling.top_p = 0.9f;
    kv->allocate(s, s.n_tokens() + 3);
    s.n_computed = s.n_tokens() - 1;
  }
  seqs[2].sample_index = 1;
  seqs[4].spec_tokens = {5, 6};
  seqs[5].n_computed = 0;
  seqs[6].n_computed = 0;
  Batch batch;
  batch.entries.push_back({&seqs[0], 1, true});
  batch.entries.push_back({&seqs[5], 30, false});
  batch.entries.push_back({&seqs[1], 1, true});
  batch.entries.push_back({&seqs[4], 3, true});
  batch.entries.push_back({&seqs[2], 1, true});
  batch.entries.push_back({&seqs[6], seqs[6].n_tokens(), true, 2});
  batch.entries.push_back({&seqs[3], 1, true});
  Step full, built;
  build_step_input(batch, *kv, vocab, full, StepDetail::full);
  ShapeStepBuilder builder;
  builder.begin(*kv, vocab, built, -1, 2, 0);  // fewer entries than come: its arrays grow
  for (const BatchEntry& e : batch.entries) ASSERT_TRUE(builder.add(e));
  builder.finish();
  ASSERT_TRUE(built.shape_only);
  const kernels::StepInput &a = full.in, &b = built.in;
  EXPECT_EQ(b.query_start, a.query_start);
  EXPECT_EQ(b.context_lens, a.context_lens);
  EXPECT_EQ(b.seq_ids, a.seq_ids);
  EXPECT_EQ(b.sample_rows, a.sample_rows);
  EXPECT_EQ(b.temperature, a.temperature);
  EXPECT_EQ(b.top_k, a.top_k);
  EXPECT_EQ(b.top_p, a.top_p);
  EXPECT_EQ(b.seed, a.seed);
  EXPECT_EQ(b.seq_key, a.seq_key);
  EXPECT_EQ(b.sample_position, a.sample_position);
  EXPECT_EQ(b.mask_index, a.mask_index);
  EXPECT_EQ(b.draft_token, a.draft_token);
  EXPECT_EQ(b.draft_dist, a.draft_dist);
  EXPECT_EQ(b.decode_only, a.decode_only);
  EXPECT_NO_THROW(check_step_shape(b));
  ASSERT_EQ(b.n_samples(), 9);  // four decodes, three verification rows, two samples

  // A masked entry is not taken while the masks are not known: the caller builds the step.
  BatchEntry masked{&seqs[0], 1, true, 1, 0};
  builder.begin(*kv, vocab, built, -1, 1, 0);
  EXPECT_FALSE(builder.add(masked));
  // A malformed entry throws as build_step_input's checks do.
  BatchEntry past{&seqs[0], 5, true};
  EXPECT_THROW(builder.add(past), std::invalid_argument);
}

// StepShape::of walks a decode-only step (every sequence one row) in its own loop: the same
// shape, bit for bit, as its walk over any step, and the same when the flag is wrong.
TEST(SimShapeStep, ADecodeOnlyShapeIsTheGeneralWalks) {
  Step step;
  kernels::StepInput& in = step.in;
  const int contexts[] = {1, 97, 4096, 17, 2};
  in.query_start = {0};
  for (int c : contexts) {
    in.context_lens.push_back(c);
    in.query_start.push_back(in.query_start.back() + 1);
  }
  in.sample_rows = {0, 1, 1, 2, 4};  // a row drawn twice, one not drawn
  in.draft_token.assign(5, -1);
  auto same = [](const StepShape& x, const StepShape& y) {
    EXPECT_EQ(x.n_tokens, y.n_tokens);
    EXPECT_EQ(x.n_sampled, y.n_sampled);
    EXPECT_EQ(x.n_seqs, y.n_seqs);
    EXPECT_EQ(x.sum_context, y.sum_context);
    EXPECT_EQ(x.max_context, y.max_context);
    EXPECT_EQ(x.attention_pairs, y.attention_pairs);
    EXPECT_EQ(x.prefill_pairs, y.prefill_pairs);
    EXPECT_EQ(x.decode_context, y.decode_context);
    EXPECT_EQ(x.verify_rows, y.verify_rows);
    EXPECT_EQ(x.verify_pairs, y.verify_pairs);
  };
  in.decode_only = false;
  const StepShape general = StepShape::of(step);
  in.decode_only = true;
  const StepShape fast = StepShape::of(step);
  same(fast, general);
  EXPECT_EQ(fast.n_sampled, 4);
  EXPECT_EQ(fast.decode_context, 97.0 + 4096 + 17 + 2);
  // Flagged decode-only but the fourth sequence verifies a draft over three rows.
  in.query_start = {0, 1, 2, 3, 6, 7};
  in.context_lens[3] = 19;
  in.sample_rows = {0, 1, 3, 4, 5, 6};
  in.draft_token = {-1, -1, 8, 9, -1, -1};
  in.decode_only = false;
  const StepShape general2 = StepShape::of(step);
  in.decode_only = true;
  same(StepShape::of(step), general2);
  EXPECT_EQ(general2.verify_rows, 3);
}

/// The sim behind a forwarding backend that counts its execute() calls and, when `decoder`, hands
/// the engine the sim's ShapeDecoder (a forwarding backend has none of its own).
class CountingSim final : public ForwardingBackend {
 public:
  CountingSim(int& n_executed, bool decoder) : ForwardingBackend(sim_backend()), n_(n_executed), decoder_(decoder) {}
  StepOutput execute(const Step& step) override {
    ++n_;
    return ForwardingBackend::execute(step);
  }
  ShapeDecoder* shape_decoder() override { return decoder_ ? inner().shape_decoder() : nullptr; }

 private:
  int& n_;
  bool decoder_;
};

// Steps of plain decodes are drawn and priced from the ShapeDecoder without a Step; every other
// step (prefills, parallel samples, preemption's recomputes) is executed. Both ways the same run.
TEST(SimShapeStep, DecodeStepsWithoutAStepRunAsExecutedOnes) {
  std::vector<Timed> items;
  for (uint64_t id = 1; id <= 24; ++id) {
    Request r = make_request(id, 5 + int(id * 7 % 40), 3 + int(id * 5 % 29));
    if (id % 3 == 0) r.sampling.temperature = 0.8f;
    if (id == 7) r.sampling.n = 2;
    items.push_back({0.002 * double(id % 9), r});
  }
  // A small arena: decodes outgrow it and preempt.
  const EngineConfig config = paged_config(continuous_sched(8, 256, false), 4096 * 3, 4);
  int n_plain = 0, n_decoded = 0;
  Engine plain(config, std::make_unique<CountingSim>(n_plain, false));
  Engine decoded(config, std::make_unique<CountingSim>(n_decoded, true));
  const RunResult a = run_virtual(plain, items), b = run_virtual(decoded, items);
  ASSERT_EQ(b.steps.size(), a.steps.size());
  EXPECT_EQ(n_plain, static_cast<int>(a.steps.size()));
  EXPECT_LT(n_decoded, n_plain / 2);  // most steps are plain decodes
  EXPECT_GT(a.n_preemptions(), 0);
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(b.steps[i].duration_s, a.steps[i].duration_s) << "step " << i;
    EXPECT_EQ(b.steps[i].batch_size, a.steps[i].batch_size) << "step " << i;
    ASSERT_EQ(b.steps[i].tokens.size(), a.steps[i].tokens.size()) << "step " << i;
    for (size_t t = 0; t < a.steps[i].tokens.size(); ++t) {
      EXPECT_EQ(b.steps[i].tokens[t].request_id, a.steps[i].tokens[t].request_id);
      EXPECT_EQ(b.steps[i].tokens[t].token, a.steps[i].tokens[t].token);
    }
  }
  ASSERT_EQ(b.finished.size(), items.size());
  for (const auto& [id, f] : a.finished) {
    EXPECT_EQ(b.at(id).outputs, f.outputs) << "request " << id;
    EXPECT_EQ(b.at(id).token_times_s, f.token_times_s) << "request " << id;
  }
}

/// run_virtual with the runner's steps of plain decodes taken by Engine::step_decodes (no
/// scheduler pass, no token events): only counted, as a capacity probe counts steps.
RunResult run_decode_steps(Engine& engine, std::vector<Timed> items, int& n_decode_steps, int& n_tokens) {
  RunResult r;
  VirtualClock clock;
  ListSource source(std::move(items));
  RunnerCallbacks cb;
  cb.on_step = [&](const StepOutcome& s) {
    engine.check_invariants();
    r.steps.push_back(s);
    n_tokens += static_cast<int>(s.tokens.size());
  };
  cb.on_decode_step = [&](const StepOutcome& s) {
    engine.check_invariants();
    EXPECT_TRUE(s.tokens.empty());
    r.steps.push_back(s);
    n_tokens += s.n_tokens;
    ++n_decode_steps;
  };
  cb.on_finished = [&](const FinishedRequest& f) { r.finished[f.request_id] = f; };
  run_engine(engine, source, clock, cb);
  return r;
}

// Steps of plain decodes made without a scheduler pass (Engine::step_decodes) are the steps the
// pass makes: arrivals land between them (admitted or held back by a full arena), sequences
// finish by length and by eos inside them,
// blocks of 4 fill every fourth decode, a small arena preempts, a request of two parallel samples
// and one whose prefix is cached run beside them. Every record, step time and token is the same;
// and an engine that keeps no token times (Engine::set_token_times(false), as capacity probes
// run) gives each record the first token's time and the length the times would give.
TEST(SimShapeStep, DecodeStepsWithoutAPassRunAsScheduledOnes) {
  for (const bool chunked : {false, true}) {
    std::vector<Timed> items;
    for (uint64_t id = 1; id <= 40; ++id) {
      Request r = make_request(id, 5 + int(id * 7 % 40), 4 + int(id * 11 % 37), id == 21 ? 2 : 0);
      if (id % 3 == 0) r.sampling.temperature = 0.8f;
      if (id % 2 == 0) r.sampling.ignore_eos = false;  // eos ends some early
      if (id == 7) r.sampling.n = 2;
      items.push_back({0.0015 * double(id) + 0.002 * double(id % 5), r});
    }
    const EngineConfig config = paged_config(continuous_sched(8, 256, chunked), 4096 * 3, 4);
    ModelConfig model = micro_model();
    model.eos_token = 7;  // the sim draws tokens in [2, vocab): eos 1 would never come
    Engine stepped(config, sim_backend(model)), decoded(config, sim_backend(model));
    stepped.set_kv_breakdown(false);  // as the decode steps run (and nothing here reads it)
    decoded.set_kv_breakdown(false);
    const RunResult a = run_virtual(stepped, items);
    int n_decode_steps = 0, n_tokens = 0;
    const RunResult b = run_decode_steps(decoded, items, n_decode_steps, n_tokens);
    Engine timeless(config, sim_backend(model));
    timeless.set_kv_breakdown(false);
    timeless.set_token_times(false);
    int n_timeless_steps = 0, n_timeless_tokens = 0;
    const RunResult c = run_decode_steps(timeless, items, n_timeless_steps, n_timeless_tokens);
    EXPECT_EQ(c.steps.size(), a.steps.size()) << "chunked " << chunked;
    ASSERT_EQ(b.steps.size(), a.steps.size()) << "chunked " << chunked;
    // Without chunked prefill most steps; with it, those with nothing waiting.
    EXPECT_GT(n_decode_steps, static_cast<int>(a.steps.size()) / (chunked ? 5 : 2)) << "chunked " << chunked;
    EXPECT_GT(a.n_preemptions(), 0);
    EXPECT_EQ(n_tokens, a.n_tokens_delivered);
    for (size_t i = 0; i < a.steps.size(); ++i) {
      EXPECT_EQ(b.steps[i].start_s, a.steps[i].start_s) << "step " << i;
      EXPECT_EQ(b.steps[i].duration_s, a.steps[i].duration_s) << "step " << i;
      EXPECT_EQ(b.steps[i].batch_size, a.steps[i].batch_size) << "step " << i;
      EXPECT_EQ(b.steps[i].n_tokens, a.steps[i].n_tokens) << "step " << i;
    }
    int n_eos = 0;
    ASSERT_EQ(b.finished.size(), items.size());
    for (const auto& [id, f] : a.finished) {
      const FinishedRequest& g = b.at(id);
      n_eos += f.reason == FinishReason::eos ? 1 : 0;
      EXPECT_EQ(g.reason, f.reason) << "request " << id;
      EXPECT_EQ(g.outputs, f.outputs) << "request " << id;
      EXPECT_EQ(g.token_times_s, f.token_times_s) << "request " << id;
      EXPECT_EQ(g.scheduled_s, f.scheduled_s) << "request " << id;
      EXPECT_EQ(g.first_token_s, f.first_token_s) << "request " << id;
      EXPECT_EQ(g.end_s, f.end_s) << "request " << id;
      EXPECT_EQ(g.preemptions, f.preemptions) << "request " << id;
      const FinishedRequest& h = c.at(id);
      EXPECT_TRUE(h.token_times_s.empty()) << "request " << id;
      EXPECT_EQ(h.first_token_s, f.first_token_s) << "request " << id;
      EXPECT_EQ(h.n_output, f.n_output) << "request " << id;
      EXPECT_EQ(h.outputs, f.outputs) << "request " << id;
      EXPECT_EQ(h.end_s, f.end_s) << "request " << id;
    }
    EXPECT_GT(n_eos, 0);
  }
}

}  // namespace sim_shape_step_test
}  // namespace servelab
