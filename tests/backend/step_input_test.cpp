// build_step_input against kv.slot() position by position, for paged (block sizes 1, 4, 16) and
// naive layouts, chunked prefill, decode, parallel samples and padding; it asks the KV manager
// once per block, not once per position.
#include "engine/backend/step_input.h"

#include <memory>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kv/kv_manager.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

using testing::make_sequence;
using testing::random_tokens;

constexpr int kVocab = 50;

using testing::CountingKv;

CountingKv make_kv(KvKind kind, int block_size) {
  KvConfig c;
  c.kind = kind;
  c.block_size = block_size;
  c.prefix_caching = false;
  c.max_model_len = 64;
  return CountingKv(make_kv_manager(c, 1024));
}

/// Every row's slot and every cached position's addressed slot equal kv.slot().
void expect_matches_kv(const Step& plan, const Batch& batch, const KvManager& kv) {
  const kernels::StepInput& in = plan.in;
  ASSERT_NO_THROW(in.validate());
  ASSERT_EQ(in.n_seqs(), static_cast<int>(batch.entries.size()));
  const kernels::KvAddressing a = in.addressing();
  int row = 0;
  for (size_t s = 0; s < batch.entries.size(); ++s) {
    const BatchEntry& e = batch.entries[s];
    const Sequence& seq = *e.seq;
    EXPECT_EQ(in.query_start[s], row);
    EXPECT_EQ(in.context_lens[s], seq.n_computed + e.n_new);
    for (int p = 0; p < seq.n_computed + e.n_new; ++p) EXPECT_EQ(a.slot(int(s), p), kv.slot(seq, p)) << s << " " << p;
    for (int p = seq.n_computed; p < seq.n_computed + e.n_new; ++p, ++row) {
      EXPECT_EQ(in.positions[row], p);
      EXPECT_EQ(in.token_ids[row], seq.tokens[p]);
      EXPECT_EQ(in.slot_mapping[row], kv.slot(seq, p));
    }
  }
  EXPECT_EQ(in.n_tokens(), row);
}

class StepBuilderLayouts : public ::testing::TestWithParam<std::pair<KvKind, int>> {};

TEST_P(StepBuilderLayouts, ChunkedPrefillThenDecodeMatchKvSlotPerPosition) {
  const auto [kind, block_size] = GetParam();
  CountingKv kv = make_kv(kind, block_size);
  // Three sequences allocated interleaved, one released, so blocks are scattered.
  Sequence a = make_sequence(1, random_tokens(23, kVocab, 1));
  Sequence b = make_sequence(2, random_tokens(9, kVocab, 2));
  Sequence filler = make_sequence(3, random_tokens(7, kVocab, 3));
  a.sampling.max_tokens = b.sampling.max_tokens = filler.sampling.max_tokens = 8;
  kv.allocate(filler, 7);
  kv.allocate(a, 10);
  kv.release(filler);
  kv.allocate(b, 9);
  Step plan;

  // Step 1: a's first chunk (10 of 23), b's whole prompt (sampled).
  Batch s1;
  s1.entries = {{&a, 10, false}, {&b, 9, true}};
  build_step_input(s1, kv, kVocab, plan);
  expect_matches_kv(plan, s1, kv);
  EXPECT_FALSE(plan.in.decode_only);
  ASSERT_EQ(plan.in.n_samples(), 1);
  EXPECT_EQ(plan.in.sample_rows[0], 18);
  EXPECT_EQ(plan.in.sample_position[0], 9);
  a.n_computed = 10;
  b.n_computed = 9;

  // Step 2: a's second chunk (its cached prefix is 10), b decodes one token.
  kv.grow(a, 23);
  b.tokens.push_back(4);
  kv.grow(b, 10);
  Batch s2;
  s2.entries = {{&a, 13, true}, {&b, 1, true}};
  kv.n_slot_calls = 0;
  build_step_input(s2, kv, kVocab, plan);
  const int64_t n_calls = kv.n_slot_calls;
  expect_matches_kv(plan, s2, kv);
  if (kind == KvKind::paged)  // one call per block of each sequence
    EXPECT_EQ(n_calls, (23 + block_size - 1) / block_size + (10 + block_size - 1) / block_size);
  else  // one per sequence
    EXPECT_EQ(n_calls, 2);
  a.n_computed = 23;
  b.n_computed = 10;

  // Step 3: both decode.
  a.tokens.push_back(7);
  b.tokens.push_back(8);
  kv.grow(a, 24);
  kv.grow(b, 11);
  Batch s3;
  s3.entries = {{&a, 1, true}, {&b, 1, true}};
  build_step_input(s3, kv, kVocab, plan);
  expect_matches_kv(plan, s3, kv);
  EXPECT_TRUE(plan.in.decode_only);
  EXPECT_EQ(plan.in.sample_rows, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(plan.in.sample_position, (std::vector<int32_t>{24, 11}));
}

INSTANTIATE_TEST_SUITE_P(All, StepBuilderLayouts,
                         ::testing::Values(std::pair{KvKind::paged, 1}, std::pair{KvKind::paged, 4},
                                           std::pair{KvKind::paged, 16}, std::pair{KvKind::naive, 1}));

TEST(StepBuilder, ParallelSamplesDrawFromOneRowWithConsecutiveSeqKeys) {
  CountingKv kv = make_kv(KvKind::paged, 4);
  Sequence a = make_sequence(1, random_tokens(6, kVocab, 5));
  a.sample_index = 2;
  a.sampling.temperature = 0.7f;
  a.sampling.top_k = 5;
  a.sampling.top_p = 0.9f;
  a.sampling.seed = 1234;
  kv.allocate(a, 6);
  Batch batch;
  batch.entries = {{&a, 6, true, 3}};
  batch.n_padding_tokens = 2;
  Step plan;
  build_step_input(batch, kv, kVocab, plan);
  expect_matches_kv(plan, batch, kv);
  EXPECT_EQ(plan.n_padding, 2);
  EXPECT_EQ(plan.n_rows(), 8);
  EXPECT_EQ(plan.in.sample_rows, (std::vector<int32_t>{5, 5, 5}));
  EXPECT_EQ(plan.in.seq_key, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(plan.in.seed, (std::vector<uint64_t>{1234, 1234, 1234}));
  EXPECT_EQ(plan.in.sample_position, (std::vector<int32_t>{6, 6, 6}));
  EXPECT_EQ(plan.in.temperature, (std::vector<float>{0.7f, 0.7f, 0.7f}));
  EXPECT_EQ(plan.in.top_k, (std::vector<int32_t>{5, 5, 5}));
  EXPECT_EQ(plan.in.top_p, (std::vector<float>{0.9f, 0.9f, 0.9f}));
}

TEST(StepBuilder, TopKOneIsGreedy) {
  CountingKv kv = make_kv(KvKind::naive, 1);
  Sequence a = make_sequence(1, random_tokens(3, kVocab, 6));
  a.sampling.temperature = 1.0f;
  a.sampling.top_k = 1;
  kv.allocate(a, 3);
  Batch batch;
  batch.entries = {{&a, 3, true}};
  Step plan;
  build_step_input(batch, kv, kVocab, plan);
  EXPECT_EQ(plan.in.temperature, (std::vector<float>{0.0f}));
}

TEST(StepBuilder, MalformedBatchesNameTheEntry) {
  CountingKv kv = make_kv(KvKind::paged, 4);
  Sequence a = make_sequence(7, {1, 2, kVocab + 3});
  kv.allocate(a, 3);
  Step plan;
  Batch bad_token;
  bad_token.entries = {{&a, 3, true}};
  try {
    build_step_input(bad_token, kv, kVocab, plan);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("batch entry 0 (seq 7): token 53 at position 2"), std::string::npos) << e.what();
  }
  Batch too_long;
  too_long.entries = {{&a, 4, true}};
  EXPECT_THROW(build_step_input(too_long, kv, kVocab, plan), std::invalid_argument);
  Batch zero;
  zero.entries = {{&a, 0, true}};
  EXPECT_THROW(build_step_input(zero, kv, kVocab, plan), std::invalid_argument);
  a.tokens[2] = 1;
  a.sampling.top_p = 0.0f;
  Batch bad_p;
  bad_p.entries = {{&a, 3, true}};
  EXPECT_THROW(build_step_input(bad_p, kv, kVocab, plan), std::invalid_argument);
  Batch null_seq;
  null_seq.entries = {{nullptr, 1, false}};
  EXPECT_THROW(build_step_input(null_seq, kv, kVocab, plan), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
