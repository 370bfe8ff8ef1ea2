// fa11 (the prefill wgmma kernel whose producer loads a key tile by TMA where its 128 slots are
// consecutive in the arena and gathers it by cp.async otherwise; tenth pass of
// kernels/notes-prefill.md) on block tables that hold sequences in physical runs, as the engine's
// PagedKvManager leaves them: runs that cover whole tiles, runs broken one block before or after a
// tile edge, single blocks, runs with descending ids (adjacent, but not consecutive in table order),
// at block sizes 1 to 256 (24: tiles that start inside a block). The shared memory it fills is fa8's,
// so every output must carry fa8's bits; chunking and batching must not change them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "kernels/attention.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/attention_gpu_util.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace fa11_test {  // named: the unity build compiles this file with the other attention tests

using testing::KvBatch;
using testing::PrefillFn;
using testing::run_prefill;

/// src's K, V and Q in a paged arena of block_size slots whose tables hold each sequence's blocks in
/// physical runs: run lengths (in blocks) cycle through lens, the runs lie in random arena order with
/// 0-2 free blocks between, and every reverse_every-th run (0: none) has its ids descending.
KvBatch with_runs(const KvBatch& src, int block_size, const std::vector<int>& lens, int reverse_every, std::mt19937_64& rng) {
  KvBatch dst;
  dst.spec = src.spec;
  dst.spec.kind = KvLayoutKind::paged;
  dst.spec.block_size = block_size;
  dst.in = src.in;
  dst.in.kv_kind = KvLayoutKind::paged;
  dst.in.block_size = block_size;
  dst.in.base_slots.clear();
  struct Run { int seq, first, len; bool reversed; };
  std::vector<Run> runs;
  int max_blocks = 1;
  for (int s = 0; s < src.in.n_seqs(); ++s) {
    const int nb = (src.in.context_lens[s] + block_size - 1) / block_size;
    max_blocks = std::max(max_blocks, nb);
    for (int j = 0, k = 0; j < nb; ++k) {
      const int len = std::min(std::max(1, lens[size_t(k) % lens.size()]), nb - j);
      runs.push_back({s, j, len, reverse_every > 0 && (runs.size() + 1) % size_t(reverse_every) == 0});
      j += len;
    }
  }
  std::shuffle(runs.begin(), runs.end(), rng);
  dst.in.block_table_stride = max_blocks;
  dst.in.block_tables.assign(size_t(src.in.n_seqs()) * max_blocks, -1);
  std::uniform_int_distribution<int> gap(0, 2);
  int next = 0;
  for (const Run& r : runs) {
    next += gap(rng);
    for (int i = 0; i < r.len; ++i)
      dst.in.block_tables[size_t(r.seq) * max_blocks + r.first + i] = next + (r.reversed ? r.len - 1 - i : i);
    next += r.len;
  }
  dst.q = src.q;
  dst.shape = src.shape;
  dst.shape.n_slots = int64_t(next + 2) * block_size;
  const size_t row = size_t(src.shape.row_elems());
  dst.k_cache = testing::random_bf16(size_t(dst.shape.n_slots) * row, rng);  // unused slots hold noise, not zeros
  dst.v_cache = testing::random_bf16(size_t(dst.shape.n_slots) * row, rng);
  const KvAddressing a = src.in.addressing(), b = dst.in.addressing();
  for (int s = 0; s < src.in.n_seqs(); ++s)
    for (int p = 0; p < src.in.context_lens[s]; ++p) {
      std::copy_n(src.k_cache.begin() + a.slot(s, p) * row, row, dst.k_cache.begin() + b.slot(s, p) * row);
      std::copy_n(src.v_cache.begin() + a.slot(s, p) * row, row, dst.v_cache.begin() + b.slot(s, p) * row);
    }
  for (size_t i = 0; i < dst.in.positions.size(); ++i) {  // the rows' own slots, as the engine would write them
    int s = 0;
    while (dst.in.query_start[s + 1] <= int(i)) ++s;
    dst.in.slot_mapping[i] = b.slot(s, dst.in.positions[i]);
  }
  return dst;
}

/// The run patterns for block_size (tb = blocks a 128-key tile spans): whole tiles only; runs
/// broken one block after and before tile edges and single blocks; engine-like lengths (23-47 blocks
/// with short ones between) with every third run descending; two-tile runs, every other one descending.
struct Pattern {
  const char* name;
  std::vector<int> lens;
  int reverse_every;
};
std::vector<Pattern> patterns(int block_size) {
  const int tb = std::max(1, 128 / block_size);
  return {{"whole tiles", {tb, 2 * tb, 3 * tb}, 0},
          {"edges", {tb + 1, std::max(1, tb - 1), 1, 2 * tb + 3, tb}, 0},
          {"engine-like", {23, 47, 5, 31, 8, 1, 40}, 3},
          {"descending", {2 * tb}, 2}};
}

const PrefillFn kFa8 = [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa8(a, st); };

class PrefillFa11Gpu : public ::testing::TestWithParam<ScalarType> {};

// Awkward shapes (single tokens, tile edges, a cached prefix, a 1000-token prompt) at GQA 1 and 4,
// every run pattern at block sizes 1-256: fa11 and the dispatched prefill_attention give fa8's bits
// (fa8 on the naive layout: its bits do not depend on the layout, attention_prefill_fa7_gpu_test.cpp).
TEST_P(PrefillFa11Gpu, SameBitsAsFa8OnRunTablesBrokenAtAwkwardPlaces) {
  SKIP_WITHOUT_GPU();
  if (!prefill_wgmma_supported(128)) GTEST_SKIP() << "no sm_90a build or not a compute 9.0 device";
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<int> ctx = {1, 17, 129, 300, 256, 140, 5, 1000}, q = {1, 17, 129, 171, 128, 1, 5, 1000};
  for (int group : {1, 4}) {
    const KvBatch b = testing::make_batch({ctx, q, 8, 8 / group, 128, KvLayoutKind::naive, 16}, rng);
    const std::vector<float> fa8 = run_prefill(t, b, kFa8);
    ASSERT_LT(testing::rel_error(fa8, testing::reference_attention(b)), testing::tolerance(t)) << "fa8 group " << group;
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, prefill_attention_wgmma_fa11).begin())) << "fa11 naive group " << group;
    for (int bs : {1, 2, 8, 16, 24, 32, 64, 128, 256})
      for (const Pattern& pat : patterns(bs)) {
        const KvBatch r = with_runs(b, bs, pat.lens, pat.reverse_every, rng);
        const std::string where = std::string(pat.name) + " block " + std::to_string(bs) + " group " + std::to_string(group);
        EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, r, prefill_attention_wgmma_fa11).begin())) << "fa11 " << where;
        EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, r, prefill_attention).begin())) << "prefill_attention " << where;
      }
  }
}

// On an engine-like run table (blocks of 16): each sequence alone, and its prompt in chunks (64, 77,
// 128 rows: tile edges and odd sizes), give the rows of the whole batch bit for bit.
TEST_P(PrefillFa11Gpu, ChunksAndBatchesOnRunTablesGiveTheSameBits) {
  SKIP_WITHOUT_GPU();
  if (!prefill_wgmma_supported(128)) GTEST_SKIP() << "no sm_90a build or not a compute 9.0 device";
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<int> ctx = {300, 1000, 17, 640}, q = {171, 1000, 17, 1};
  for (int group : {1, 4}) {
    const KvBatch naive = testing::make_batch({ctx, q, 8, 8 / group, 128, KvLayoutKind::naive, 16}, rng);
    const KvBatch b = with_runs(naive, 16, {23, 47, 5, 31, 8, 1, 40}, 3, rng);
    const size_t row = size_t(b.spec.n_heads) * b.spec.head_dim;
    const std::vector<float> all = run_prefill(t, b, prefill_attention_wgmma_fa11);
    for (int s : {0, 1}) {
      const size_t r0 = size_t(b.in.query_start[s]) * row;
      const std::vector<float> alone = run_prefill(t, testing::rows_of(b, s, 0, q[s]), prefill_attention_wgmma_fa11);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + r0)) << "group " << group << " seq " << s;
      for (int chunk : {64, 77, 128})
        for (int start = 0; start < q[s]; start += chunk) {
          const int end = std::min(q[s], start + chunk);
          const std::vector<float> part = run_prefill(t, testing::rows_of(b, s, start, end), prefill_attention_wgmma_fa11);
          ASSERT_TRUE(std::equal(part.begin(), part.end(), all.begin() + r0 + size_t(start) * row))
              << "group " << group << " seq " << s << " chunk " << chunk << " start " << start;
        }
    }
  }
}

// A 4096-token prompt (32 key tiles a row: TMA and gathered tiles alternate in the stage rings) at
// GQA 1 and 4 on blocks of 16: engine-like runs, one run (every tile by TMA) and the shuffled
// table (every tile gathered) all give fa8's bits.
TEST_P(PrefillFa11Gpu, LongPromptOnRunTablesGivesFa8Bits) {
  SKIP_WITHOUT_GPU();
  if (!prefill_wgmma_supported(128)) GTEST_SKIP() << "no sm_90a build or not a compute 9.0 device";
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int n_kv : {1, 4}) {
    const KvBatch b = testing::make_batch({{4096}, {4096}, 4, n_kv, 128, KvLayoutKind::paged, 16}, rng);
    const std::vector<float> fa8 = run_prefill(t, b, kFa8);
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, prefill_attention_wgmma_fa11).begin())) << "shuffled " << n_kv;
    for (const Pattern& pat : {Pattern{"engine-like", {23, 47, 5, 31, 8, 1, 40}, 3}, Pattern{"one run", {256}, 0}}) {
      const KvBatch r = with_runs(b, 16, pat.lens, pat.reverse_every, rng);
      EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, r, prefill_attention_wgmma_fa11).begin())) << pat.name << " " << n_kv;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PrefillFa11Gpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace fa11_test
}  // namespace servelab::kernels
