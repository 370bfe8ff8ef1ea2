// Shape-only steps (Step::shape_only, BackendCaps::reads_rows): the engine sends the sim backend
// only the step's shape and draws, and the sim prices and draws exactly as from the full step.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

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

}  // namespace sim_shape_step_test
}  // namespace servelab
