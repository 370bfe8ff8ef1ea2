#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "kernels/ref/attention_ref.h"
#include "tests/kernels/kv_fixture.h"

namespace servelab::kernels {
namespace {

using testing::BatchSpec;
using testing::KvBatch;

std::vector<float> run_ref(const KvBatch& b) { return testing::reference_attention(b, NAN); }

TEST(AttentionRef, SingleKeyReturnsItsValue) {
  std::mt19937_64 rng(1);
  const KvBatch b = testing::make_batch({{1}, {1}, 4, 2, 8, KvLayoutKind::paged, 1}, rng);
  const std::vector<float> out = run_ref(b);
  const int64_t slot = b.in.slot_mapping[0];
  for (int h = 0; h < 4; ++h)
    for (int d = 0; d < 8; ++d) EXPECT_EQ(out[h * 8 + d], b.v_cache[slot * 16 + (h / 2) * 8 + d]);
}

TEST(AttentionRef, HandComputedTwoKeys) {
  std::mt19937_64 rng(2);
  KvBatch b = testing::make_batch({{2}, {1}, 1, 1, 2, KvLayoutKind::naive, 16}, rng);
  const int64_t s0 = b.in.base_slots[0];
  b.q = {1.0f, 0.0f};
  b.k_cache[s0 * 2] = 0.0f, b.k_cache[s0 * 2 + 1] = 0.0f;       // score 0
  b.k_cache[s0 * 2 + 2] = 2.0f, b.k_cache[s0 * 2 + 3] = 5.0f;   // score 2 / sqrt(2)
  b.v_cache[s0 * 2] = 1.0f, b.v_cache[s0 * 2 + 1] = 0.0f;
  b.v_cache[s0 * 2 + 2] = 0.0f, b.v_cache[s0 * 2 + 3] = 1.0f;
  const std::vector<float> out = run_ref(b);
  const double w1 = std::exp(2.0 / std::sqrt(2.0)), w0 = 1.0;
  EXPECT_NEAR(out[0], w0 / (w0 + w1), 1e-6);
  EXPECT_NEAR(out[1], w1 / (w0 + w1), 1e-6);
}

TEST(AttentionRef, PagedEqualsContiguousForEveryBlockSizeAndGqa) {
  std::mt19937_64 rng(3);
  for (int group : {1, 4, 8})
    for (int bs : {1, 16, 32}) {
      const BatchSpec spec{{1, 97, 40, 5}, {1, 3, 40, 1}, 8, 8 / group, 16, KvLayoutKind::naive, 16};
      const KvBatch naive = testing::make_batch(spec, rng);
      const KvBatch paged = testing::relayout(naive, KvLayoutKind::paged, bs, rng);
      ASSERT_NO_THROW(paged.in.validate());
      EXPECT_EQ(run_ref(naive), run_ref(paged)) << "group " << group << " block " << bs;
    }
}

TEST(AttentionRef, BatchedEqualsOneSequenceAtATime) {
  std::mt19937_64 rng(4);
  const KvBatch b = testing::make_batch({{17, 97, 1}, {17, 1, 1}, 4, 1, 16, KvLayoutKind::paged, 16}, rng);
  const std::vector<float> all = run_ref(b);
  for (int s = 0; s < 3; ++s) {
    AttentionRefArgs a;
    std::vector<float> out(size_t(b.spec.q_lens[s]) * 4 * 16);
    const int32_t qs[2] = {0, b.spec.q_lens[s]};
    a.q = b.q.data() + size_t(b.in.query_start[s]) * 64;
    a.k_cache = b.k_cache.data();
    a.v_cache = b.v_cache.data();
    a.shape = b.shape;
    a.n_heads = 4;
    a.n_seqs = 1;
    a.query_start = qs;
    a.context_lens = &b.in.context_lens[s];
    a.kv = b.in.addressing();
    a.kv.block_tables += size_t(s) * b.in.block_table_stride;
    a.scale = 0.25f;
    a.out = out.data();
    attention_ref(a);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), all.begin() + size_t(b.in.query_start[s]) * 64)) << s;
  }
}

TEST(AttentionRef, ChunkedPrefillEqualsFullPrefill) {
  std::mt19937_64 rng(5);
  const int n = 97;
  const KvBatch full = testing::make_batch({{n}, {n}, 8, 2, 16, KvLayoutKind::paged, 16}, rng);
  const std::vector<float> ref = run_ref(full);
  const int64_t row_q = 8 * 16;
  for (int chunk : {1, 16, 33}) {
    for (int start = 0; start < n; start += chunk) {  // chunk [start, end) with prefix [0, start) cached
      const int end = std::min(n, start + chunk);
      KvBatch c = full;
      c.in.query_start = {0, end - start};
      c.in.context_lens = {end};
      c.q.assign(full.q.begin() + start * row_q, full.q.begin() + end * row_q);
      const std::vector<float> out = run_ref(c);
      EXPECT_TRUE(std::equal(out.begin(), out.end(), ref.begin() + start * row_q)) << chunk << " " << start;
    }
  }
}

}  // namespace
}  // namespace servelab::kernels
