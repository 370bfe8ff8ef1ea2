// fa7 (the prefill wgmma kernel with a share of each row's exp2 on the FMA pipe, seventh pass of
// kernels/notes-prefill.md): its exp2 against the C++ reference bit for bit, and the invariance
// contract kept exactly, the kernel against itself: the same bits whatever the KV layout (naive,
// paged blocks of 1 to 256 slots), the chunking of a prompt, or the other sequences of the batch.
// Its error against the reference and against fa6 is checked in attention_scratch_gpu_test.cpp
// beside the other superseded wgmma kernels. fa5 runs the same invariance checks here as the control.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "kernels/ref/exp2_poly.h"
#include "kernels/scratch/attention_prefill_scratch.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/attention_gpu_util.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace fa7_test {  // named: the unity build compiles this file with attention_gpu_test.cpp

using testing::BatchSpec;
using testing::KvBatch;
using testing::PrefillFn;
using testing::rows_of;
using testing::run_prefill;

// fa7 at its three FMA shares, fa8 (conditional rescaling, other bits too), fa8 on the lean
// producer, fa9 (fa8 with the row sums on the tensor core), fa10 (fa8 on the TMA producer: whole
// key tiles in 128-row boxes on the naive layout and blocks of 256, a box a block for 16-64, fa8's
// cp.async for blocks of 1), fa11 (fa8 with TMA per tile where its slots are consecutive: the naive
// layout, blocks of 256, tiles of blocks that happen to be adjacent), the dispatched prefill_attention (whichever kernel each layout gets:
// one row's bits must not depend on the layout either), then fa5 as the control.
const PrefillFn kKernels[] = {[](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa7(a, st, 16); },
                              [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa7(a, st, 24); },
                              [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa7(a, st, 32); },
                              [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa8_part(a, st, 0); },
                              [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa8_part(a, st, 1); },
                              prefill_attention_wgmma_fa9, prefill_attention_wgmma_fa10, prefill_attention_wgmma_fa11, prefill_attention_wgmma_fa11_vote,
                              [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention(a, st); }, prefill_attention_wgmma_fa5};
const char* const kNames[] = {"fa7_p16", "fa7_p24", "fa7_p32", "fa8", "fa8_lean", "fa9", "fa10", "fa11", "fa11_vote", "prefill_attention", "fa5"};
static_assert(std::size(kKernels) == std::size(kNames));

class PrefillFa7Gpu : public ::testing::TestWithParam<ScalarType> {};

TEST_P(PrefillFa7Gpu, SameBitsAcrossKvLayoutsChunksAndBatches) {
  SKIP_WITHOUT_GPU();
  if (!prefill_wgmma_supported(128)) GTEST_SKIP() << "no sm_90a build or not a compute 9.0 device";
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<int> ctx = {300, 129, 17, 1, 256, 140};
  const std::vector<int> q = {171, 129, 17, 1, 128, 1};
  for (int group : {1, 4}) {
    const KvBatch b = testing::make_batch({ctx, q, 8, 8 / group, 128, KvLayoutKind::naive, 16}, rng);
    std::vector<KvBatch> paged;
    for (int bs : {1, 16, 32, 64, 256}) paged.push_back(testing::relayout(b, KvLayoutKind::paged, bs, rng));
    const size_t row = size_t(b.spec.n_heads) * b.spec.head_dim;
    for (int k = 0; k < int(std::size(kKernels)); ++k) {
      const std::vector<float> all = run_prefill(t, b, kKernels[k]);
      ASSERT_FALSE(std::any_of(all.begin(), all.end(), [](float x) { return std::isnan(x); })) << kNames[k];
      for (const KvBatch& p : paged)  // layout: paged blocks of 1-256 slots against naive
        EXPECT_TRUE(std::equal(all.begin(), all.end(), run_prefill(t, p, kKernels[k]).begin()))
            << kNames[k] << " group " << group << " block " << p.spec.block_size;
      for (int s : {0, 4}) {  // batch: a sequence alone, then its prompt in chunks (a tile edge, odd sizes, single rows)
        const int q_len = q[s];
        const size_t r0 = size_t(b.in.query_start[s]) * row;
        const std::vector<float> alone = run_prefill(t, rows_of(b, s, 0, q_len), kKernels[k]);
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + r0)) << kNames[k] << " group " << group << " seq " << s;
        for (int chunk : {1, 64, 77}) {
          for (int start = 0; start < q_len; start += chunk) {
            const int end = std::min(q_len, start + chunk);
            const std::vector<float> part = run_prefill(t, rows_of(b, s, start, end), kKernels[k]);
            ASSERT_TRUE(std::equal(part.begin(), part.end(), all.begin() + r0 + size_t(start) * row))
                << kNames[k] << " group " << group << " seq " << s << " chunk " << chunk << " start " << start;
          }
        }
      }
    }
  }
  const KvBatch small = testing::make_batch({{5}, {5}, 8, 8, 128, KvLayoutKind::paged, 16}, rng);
  EXPECT_THROW(run_prefill(t, small, [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa7(a, st, 20); }),
               std::invalid_argument);
  EXPECT_THROW(run_prefill(t, small, [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa8_part(a, st, 3); }),
               std::invalid_argument);
}

/// fa8's output (part 0).
void run_fa8(const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa8(a, st); }

// fa9 (eighth pass): l from the tensor core, the sum of the 16-bit P that P·V multiplies (fa8 sums
// the fp32 P): other bits, within the kernels' tolerance of the reference and a quarter of it of
// fa8. Returns {fa9's error, fa8's error, fa9 from fa8}.
std::array<double, 3> check_fa9(ScalarType t, const KvBatch& b, const std::string& what) {
  const std::vector<float> ref = testing::reference_attention(b);
  const std::vector<float> fa8 = run_prefill(t, b, run_fa8), fa9 = run_prefill(t, b, prefill_attention_wgmma_fa9);
  const double e9 = testing::rel_error(fa9, ref), e8 = testing::rel_error(fa8, ref), d = testing::rel_error(fa9, fa8);
  EXPECT_LT(e9, testing::tolerance(t)) << "fa9 " << what;
  EXPECT_LT(d, 0.25 * testing::tolerance(t)) << "fa9 against fa8 " << what;
  return {e9, e8, d};
}

// The awkward shapes (tile edges, cached prefixes, GQA 1 / 4 / 8, paged blocks of 1-256 and
// naive), and a batch whose late keys are 8x larger: the kept maximum moves mid-row, so the O and
// l rescale runs and a wrong factor on l shows.
TEST_P(PrefillFa7Gpu, Fa9MatchesReferenceAndFa8OnAwkwardShapes) {
  SKIP_WITHOUT_GPU();
  if (!prefill_wgmma_supported(128)) GTEST_SKIP() << "no sm_90a build or not a compute 9.0 device";
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  testing::for_each_awkward_prefill(rng, [&](const KvBatch& b, const std::string& where) { check_fa9(t, b, where); });
  KvBatch big = testing::make_batch({{300, 700}, {300, 700}, 8, 2, 128, KvLayoutKind::paged, 16}, rng);
  const KvAddressing kv = big.in.addressing();
  const int64_t row = big.shape.row_elems();
  for (int s = 0; s < 2; ++s)
    for (int pos : {150, 201, 290, 600})  // x8 (exact in bf16 / f16): scores of sd 8, maxima jump mid-row
      if (pos < big.in.context_lens[s])
        for (int64_t i = 0; i < row; ++i) big.k_cache[size_t(kv.slot(s, pos) * row + i)] *= 8.0f;
  const auto e = check_fa9(t, big, "large late keys");
  std::printf("    large late keys: rel err fa9 %.3e, fa8 %.3e, fa9 from fa8 %.3e\n", e[0], e[1], e[2]);
}

// A 2048-token prompt at GQA 1 and 4 (16 key tiles a row tile at most: the sums carried and
// rescaled over many tiles).
TEST_P(PrefillFa7Gpu, Fa9LongPromptMatchesReferenceAndFa8) {
  SKIP_WITHOUT_GPU();
  if (!prefill_wgmma_supported(128)) GTEST_SKIP() << "no sm_90a build or not a compute 9.0 device";
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int n_kv : {1, 4}) {
    const auto e = check_fa9(t, testing::make_batch({{2048}, {2048}, 4, n_kv, 128, KvLayoutKind::paged, 16}, rng), "2k n_kv " + std::to_string(n_kv));
    std::printf("    2k prompt n_kv %d: rel err fa9 %.3e, fa8 %.3e, fa9 from fa8 %.3e\n", n_kv, e[0], e[1], e[2]);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PrefillFa7Gpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

// The kernels' exp2 (prefill_exp2_poly runs the same device function) against exp2_poly3: every
// x = k / 1024 in [-130, 1], random floats, and the special values.
TEST(PrefillExp2PolyGpu, MatchesItsCppReferenceBitForBit) {
  SKIP_WITHOUT_GPU();
  std::vector<float> x;
  for (int k = -130 * 1024; k <= 1024; ++k) x.push_back(float(k) / 1024.0f);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> d(-140.0f, 1.0f);
  for (int i = 0; i < (1 << 18); ++i) x.push_back(d(rng));
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {-inf, -0.0f, 0.0f, -126.0f, -127.0f, -1e30f, std::numeric_limits<float>::quiet_NaN()}) x.push_back(v);
  const testing::DeviceBuffer dx = testing::upload(x);
  testing::DeviceBuffer dy(x.size() * sizeof(float));
  dy.poison();
  prefill_exp2_poly(dx.get<float>(), dy.get<float>(), int64_t(x.size()), nullptr);
  const std::vector<float> y = testing::download<float>(dy, x.size());
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(exp2_poly::exp2_poly3(x[i])) && ++bad <= 5)
      ADD_FAILURE() << "x " << x[i] << ": device " << y[i] << ", reference " << exp2_poly::exp2_poly3(x[i]);
  EXPECT_EQ(bad, 0);
  EXPECT_THROW(prefill_exp2_poly(dx.get<float>(), dy.get<float>(), -1, nullptr), std::invalid_argument);
}

}  // namespace fa7_test
}  // namespace servelab::kernels
