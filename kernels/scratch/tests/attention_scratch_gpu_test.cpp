// The superseded wgmma prefill kernels against the reference and against each other (their
// contract: the same bits where only the schedule or the producer differs), as they were tested
// while each was the one dispatched (kernels/notes-prefill.md). The production kernels' own tests:
// tests/kernels_gpu/attention_gpu_test.cpp.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <random>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/scratch/attention_prefill_scratch.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/attention_gpu_util.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace scratch_test {

using testing::KvBatch;
using testing::PrefillFn;
using testing::run_prefill;

std::vector<float> reference(const KvBatch& b) { return testing::reference_attention(b); }

/// 17 sequences: contexts 1, 97 and random lengths up to 300.
std::vector<int> contexts17(std::mt19937_64& rng) {
  std::vector<int> c = {1, 97};
  std::uniform_int_distribution<int> len(1, 300);
  while (c.size() < 17) c.push_back(len(rng));
  return c;
}

/// Every test runs in bf16 and in fp16 storage (names end in /bf16 and /f16).
class AttentionScratchGpu : public ::testing::TestWithParam<ScalarType> {};

// fa5's parts (prefill_attention_wgmma_fa5_part 0..7: 6 is fa6, 7 fa6's tree maxima alone) as PrefillFn.
const PrefillFn kFa5Parts[] = {
    [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa5_part(a, st, 0); },
    [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa5_part(a, st, 1); },
    [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa5_part(a, st, 2); },
    [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa5_part(a, st, 3); },
    [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa5_part(a, st, 4); },
    [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa5_part(a, st, 5); },
    [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa5_part(a, st, 6); },
    [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa5_part(a, st, 7); }};
constexpr int kNumFa5Parts = int(std::size(kFa5Parts));
// fa7 at FMA shares 16, 24, 32 (seventh pass). Its exp2 polynomial moves P by <= 8.8e-5 before
// the 16-bit rounding: other bits than fa6, checked against the reference with the kernels'
// tolerance (1e-2 bf16, 5e-3 f16) and against fa6's bits (= v5.1 ws / lean) within a quarter of it.
const PrefillFn kFa7[] = {[](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa7(a, st, 16); },
                          [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa7(a, st, 24); },
                          [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa7(a, st, 32); }};
constexpr int kFa7Shares[] = {16, 24, 32};
// fa8 (part 0; FlashAttention-4's conditional rescaling, other bits, the same checks as fa7), fa8
// on the lean producer (part 1: fa8's bits) and fa6's consumers on it (part 2: fa6's bits).
const PrefillFn kFa8[] = {[](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa8_part(a, st, 0); },
                          [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa8_part(a, st, 1); },
                          [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa8_part(a, st, 2); }};

#define SKIP_WITHOUT_WGMMA()                                                    \
  SKIP_WITHOUT_GPU();                                                           \
  if (!prefill_wgmma_supported(128)) GTEST_SKIP() << "no sm_90a build or not a compute 9.0 device"

// v1 (WMMA) on the shapes the production kernels are checked on.
TEST_P(AttentionScratchGpu, PrefillWmmaMatchesReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive})
    for (int group : {1, 4, 8})
      for (int bs : {1, 16, 32}) {
        if (kind == KvLayoutKind::naive && bs != 16) continue;
        for (int hd : {32, 64, 128}) {
          const std::vector<int> ctx = {97, 1, 200, 64, 65, 130, 8};
          const std::vector<int> q = {97, 1, 33, 64, 65, 63, 1};
          const KvBatch b = testing::make_batch({ctx, q, 8, 8 / group, hd, kind, bs}, rng);
          EXPECT_LT(testing::rel_error(run_prefill(t, b, prefill_attention_wmma), reference(b)), testing::tolerance(t))
              << "wmma: layout " << int(kind) << " group " << group << " block " << bs << " hd " << hd;
        }
      }
}

// The wgmma kernel (128-row tiles, 128-position key tiles) on shapes around its tile edges:
// query lengths 1, 17, 129; chunks after cached prefixes (one ending on a tile edge, one not);
// GQA 1, 4, 8; block sizes 1, 16, 32, 64, 256 and the naive layout. The wgmma kernels (warp-
// specialized v5.1 with and without ping-pong, v6 with TMA boxes of 16, 32, 64 or 128 rows and
// cp.async for block size 1, v6.1's lean producer, v7, fa5 and its parts, the barrier-per-tile
// v4.1) and the mma kernel run side by side.
TEST_P(AttentionScratchGpu, PrefillWgmmaMatchesReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_WGMMA();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  testing::for_each_awkward_prefill(rng, [&](const KvBatch& b, const std::string& where) {
    const std::vector<float> ref = reference(b);
    const std::vector<float> ws = run_prefill(t, b, prefill_attention_wgmma_ws);
    EXPECT_LT(testing::rel_error(ws, ref), testing::tolerance(t)) << where;
    EXPECT_LT(testing::rel_error(run_prefill(t, b, prefill_attention_wgmma_sync), ref), testing::tolerance(t))
        << "sync: " << where;
    // Ping-pong changes only when each warpgroup issues, never the arithmetic: the same bits.
    EXPECT_TRUE(std::equal(ws.begin(), ws.end(), run_prefill(t, b, prefill_attention_wgmma_pingpong).begin()))
        << "pingpong differs from ws: " << where;
    // TMA or cp.async fill the same shared memory: the same bits again.
    EXPECT_TRUE(std::equal(ws.begin(), ws.end(), run_prefill(t, b, prefill_attention_wgmma_tma).begin()))
        << "tma differs from ws: " << where;
    EXPECT_TRUE(std::equal(ws.begin(), ws.end(), run_prefill(t, b, prefill_attention_wgmma_lean).begin()))
        << "lean differs from ws: " << where;
    EXPECT_TRUE(std::equal(ws.begin(), ws.end(), run_prefill(t, b, [](const PrefillAttentionArgs& a, cudaStream_t st) {
                             prefill_attention_wgmma_persist(a, st);
                           }).begin()))
        << "persist differs from ws: " << where;
    // fa5 and its parts change only the consumers' instruction order, fa6 the order of an exact
    // max and how equal values are computed: the same bits.
    for (int part = 0; part < kNumFa5Parts; ++part) {
      EXPECT_TRUE(std::equal(ws.begin(), ws.end(), run_prefill(t, b, kFa5Parts[part]).begin()))
          << "fa5 part " << part << " differs from ws: " << where;
    }
    EXPECT_TRUE(std::equal(ws.begin(), ws.end(), run_prefill(t, b, prefill_attention_wgmma_fa5).begin()))
        << "fa5 differs from ws: " << where;
    EXPECT_TRUE(std::equal(ws.begin(), ws.end(), run_prefill(t, b, prefill_attention_wgmma_fa6).begin()))
        << "fa6 differs from ws: " << where;
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> fa7 = run_prefill(t, b, kFa7[i]);
      EXPECT_LT(testing::rel_error(fa7, ref), testing::tolerance(t)) << "fa7 " << kFa7Shares[i] << " " << where;
      EXPECT_LT(testing::rel_error(fa7, ws), 0.25 * testing::tolerance(t)) << "fa7 " << kFa7Shares[i] << " against fa6's bits, " << where;
    }
    const std::vector<float> fa8 = run_prefill(t, b, kFa8[0]);
    EXPECT_LT(testing::rel_error(fa8, ref), testing::tolerance(t)) << "fa8 " << where;
    EXPECT_LT(testing::rel_error(fa8, ws), 0.25 * testing::tolerance(t)) << "fa8 against fa6's bits, " << where;
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, kFa8[1]).begin())) << "fa8_lean differs from fa8, " << where;
    EXPECT_TRUE(std::equal(ws.begin(), ws.end(), run_prefill(t, b, kFa8[2]).begin())) << "fa6_lean differs from ws, " << where;
    // fa10: fa8's consumers on the TMA producer (boxes of 16-128 rows, cp.async for block size 1).
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, prefill_attention_wgmma_fa10).begin())) << "fa10 differs from fa8, " << where;
    // fa11: per tile, two 128-row boxes where the slots are consecutive (naive, block 256), else fa8's gather.
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, prefill_attention_wgmma_fa11).begin())) << "fa11 differs from fa8, " << where;
    EXPECT_LT(testing::rel_error(run_prefill(t, b, prefill_attention_mma), ref), testing::tolerance(t))
        << "mma: " << where;
  });
}

// A 4096-token prompt (32 row tiles at GQA 1 and 4: rows of a tile span 128 or 32 positions).
TEST_P(AttentionScratchGpu, PrefillWgmma4kPromptMatchesReference) {
  SKIP_WITHOUT_WGMMA();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int n_kv : {1, 4}) {
    const KvBatch b = testing::make_batch({{4096}, {4096}, 4, n_kv, 128, KvLayoutKind::paged, 16}, rng);
    const std::vector<float> ref = reference(b);
    const std::vector<float> lean = run_prefill(t, b, prefill_attention_wgmma_lean);
    EXPECT_LT(testing::rel_error(lean, ref), testing::tolerance(t)) << "lean " << n_kv;
    const std::vector<float> tma = run_prefill(t, b, prefill_attention_wgmma_tma);
    EXPECT_LT(testing::rel_error(tma, ref), testing::tolerance(t)) << "tma " << n_kv;
    EXPECT_TRUE(std::equal(lean.begin(), lean.end(), tma.begin())) << "lean and tma differ " << n_kv;
    const std::vector<float> persist =
        run_prefill(t, b, [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_persist(a, st); });
    EXPECT_TRUE(std::equal(lean.begin(), lean.end(), persist.begin())) << "lean and persist differ " << n_kv;
    for (int part = 0; part < kNumFa5Parts; ++part) {  // fa5 (part 0), its parts and fa6 (6, 7): v5.1's (= lean's) bits
      const std::vector<float> fa5 = run_prefill(t, b, kFa5Parts[part]);
      EXPECT_TRUE(std::equal(lean.begin(), lean.end(), fa5.begin())) << "lean and fa5 part " << part << " differ " << n_kv;
    }
    const double e_fa6 = testing::rel_error(lean, ref);
    std::printf("    4k prompt n_kv %d: rel err against the reference: fa6 %.3e", n_kv, e_fa6);
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> fa7 = run_prefill(t, b, kFa7[i]);
      const double e = testing::rel_error(fa7, ref), d = testing::rel_error(fa7, lean);
      std::printf(", fa7_p%d %.3e (%.3e from fa6)", kFa7Shares[i], e, d);
      EXPECT_LT(e, testing::tolerance(t)) << "fa7 " << kFa7Shares[i] << " " << n_kv;
      EXPECT_LT(d, 0.25 * testing::tolerance(t)) << "fa7 " << kFa7Shares[i] << " against fa6's bits " << n_kv;
    }
    const std::vector<float> fa8 = run_prefill(t, b, kFa8[0]);
    const double e8 = testing::rel_error(fa8, ref), d8 = testing::rel_error(fa8, lean);
    std::printf(", fa8 %.3e (%.3e from fa6)\n", e8, d8);
    EXPECT_LT(e8, testing::tolerance(t)) << "fa8 " << n_kv;
    EXPECT_LT(d8, 0.25 * testing::tolerance(t)) << "fa8 against fa6's bits " << n_kv;
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, kFa8[1]).begin())) << "fa8_lean differs from fa8 " << n_kv;
    EXPECT_TRUE(std::equal(lean.begin(), lean.end(), run_prefill(t, b, kFa8[2]).begin())) << "fa6_lean differs from lean " << n_kv;
    // fa10 on 16-row boxes here, and on 128-row boxes (the naive layout, paged blocks of 256): fa8's bits.
    EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, b, prefill_attention_wgmma_fa10).begin())) << "fa10 block 16 " << n_kv;
    for (auto [kind, bs] : {std::pair{KvLayoutKind::naive, 16}, std::pair{KvLayoutKind::paged, 256}}) {
      const KvBatch other = testing::relayout(b, kind, bs, rng);
      EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, other, prefill_attention_wgmma_fa10).begin()))
          << "fa10 layout " << int(kind) << " block " << bs << " " << n_kv;
      EXPECT_TRUE(std::equal(fa8.begin(), fa8.end(), run_prefill(t, other, prefill_attention).begin()))
          << "prefill_attention layout " << int(kind) << " block " << bs << " " << n_kv;
    }
    EXPECT_LT(testing::rel_error(run_prefill(t, b, prefill_attention_wgmma_pingpong), ref), testing::tolerance(t)) << n_kv;
    EXPECT_LT(testing::rel_error(run_prefill(t, b, prefill_attention_wgmma_ws), ref), testing::tolerance(t)) << "ws " << n_kv;
    EXPECT_LT(testing::rel_error(run_prefill(t, b, prefill_attention_wgmma_sync), ref), testing::tolerance(t)) << "sync " << n_kv;
  }
}

// v7's persistent grid on fewer blocks than items (1, 2, 3, 7 blocks: many items per block, the
// snake's reversed rounds, a last round that leaves blocks idle): each block carries its rings'
// stages, Q and the ping-pong turns across items, and every row keeps v6.1's bits. 17 sequences
// (cached prefixes, single tokens), paged blocks of 16 and 1 and the naive layout, GQA 1 and 4.
TEST_P(AttentionScratchGpu, PrefillWgmmaPersistentGridMatchesLeanOnFewBlocks) {
  SKIP_WITHOUT_WGMMA();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<int> ctx = contexts17(rng);
  std::vector<int> q(ctx.size());
  std::uniform_int_distribution<int> frac(1, 100);
  for (size_t i = 0; i < ctx.size(); ++i) q[i] = std::max(1, ctx[i] * frac(rng) / 100);
  for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive})
    for (int group : {1, 4})
      for (int bs : {1, 16}) {
        if (kind == KvLayoutKind::naive && bs != 16) continue;
        const KvBatch b = testing::make_batch({ctx, q, 8, 8 / group, 128, kind, bs}, rng);
        const std::vector<float> lean = run_prefill(t, b, prefill_attention_wgmma_lean);
        EXPECT_LT(testing::rel_error(lean, reference(b)), testing::tolerance(t)) << int(kind) << " " << group << " " << bs;
        const PrefillFn few[] = {
            [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_persist(a, st, 1); },
            [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_persist(a, st, 2); },
            [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_persist(a, st, 3); },
            [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_persist(a, st, 7); }};
        for (int i = 0; i < 4; ++i) {
          const std::vector<float> out = run_prefill(t, b, few[i]);
          EXPECT_TRUE(std::equal(lean.begin(), lean.end(), out.begin()))
              << "persist (" << i << ") differs from lean: layout " << int(kind) << " group " << group << " block " << bs;
        }
      }
  const KvBatch b = testing::make_batch({{5}, {5}, 8, 8, 128, KvLayoutKind::paged, 16}, rng);
  EXPECT_THROW(run_prefill(t, b, [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_persist(a, st, -1); }),
               std::invalid_argument);
  EXPECT_THROW(run_prefill(t, b, [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa5_part(a, st, 8); }),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionScratchGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace scratch_test
}  // namespace servelab::kernels
