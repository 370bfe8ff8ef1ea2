// GPU sampling against sampling_ref (token for token), its reproducibility, and the cuBLASLt
// GEMM against gemm_ref, including batch invariance of its rows.
#include <set>

#include <gtest/gtest.h>

#include "kernels/gemm.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/sampling_ref.h"
#include "kernels/sampling.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace {

using testing::DeviceBuffer;

std::vector<int32_t> run_sampler(const std::vector<float>& logits, int vocab, const std::vector<SampleParams>& ps) {
  const int n = static_cast<int>(ps.size());
  std::vector<float> t(n), p(n);
  std::vector<int32_t> k(n), pos(n);
  std::vector<uint64_t> seed(n), key(n);
  for (int i = 0; i < n; ++i) {
    t[i] = ps[i].temperature;
    p[i] = ps[i].top_p;
    k[i] = ps[i].top_k;
    pos[i] = ps[i].position;
    seed[i] = ps[i].seed;
    key[i] = ps[i].seq_key;
  }
  DeviceBuffer dl = testing::upload(logits), dt = testing::upload(t), dp = testing::upload(p), dk = testing::upload(k);
  DeviceBuffer dpos = testing::upload(pos), dseed = testing::upload(seed), dkey = testing::upload(key), out(n * 4);
  out.poison();
  SampleArgs a;
  a.logits = dl.get<float>();
  a.n_rows = n;
  a.vocab = vocab;
  a.temperature = dt.get<float>();
  a.top_k = dk.get<int32_t>();
  a.top_p = dp.get<float>();
  a.seed = dseed.get<uint64_t>();
  a.seq_key = dkey.get<uint64_t>();
  a.position = dpos.get<int32_t>();
  a.tokens = out.get<int32_t>();
  sample_tokens(a, nullptr);
  return testing::download<int32_t>(out, n);
}

TEST(SamplingGpu, MatchesReferenceTokenForToken) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const int vocab = 32000, n = 64;
  std::vector<float> logits = testing::random_bf16(size_t(n) * vocab, rng, 3.0f);
  logits[5] = NAN;  // NaN never wins, never counts
  std::vector<SampleParams> ps(n);
  std::uniform_int_distribution<uint64_t> seed;
  for (int i = 0; i < n; ++i) {
    SampleParams& s = ps[i];
    s.temperature = i % 8 == 0 ? 0.0f : 0.3f + 0.1f * (i % 10);
    s.top_k = i % 3 == 0 ? 0 : (i % 3 == 1 ? 50 : 1000);
    s.top_p = i % 4 == 0 ? 1.0f : 0.9f;
    s.seed = seed(rng);
    s.seq_key = i % 2;
    s.position = i * 7;
  }
  const std::vector<int32_t> gpu = run_sampler(logits, vocab, ps);
  int mismatches = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t ref = sample_ref(std::span<const float>(logits.data() + size_t(i) * vocab, vocab), ps[i]);
    if (ps[i].temperature == 0.0f) EXPECT_EQ(gpu[i], ref) << "greedy row " << i;
    mismatches += gpu[i] != ref;
  }
  // expf/logf may differ from the host's by an ulp: a near-tie can flip, almost never.
  EXPECT_LE(mismatches, 1);
  EXPECT_EQ(run_sampler(logits, vocab, ps), gpu) << "same seeds, same tokens";
}

TEST(SamplingGpu, TokenMasksMatchTheReferenceAndOnlyAllowedTokensAreDrawn) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(7);
  const int vocab = 1000, n = 6, words = (vocab + 31) / 32;  // 1000 = 31 words + 8 bits: an awkward tail
  std::vector<float> logits = testing::random_bf16(size_t(n) * vocab, rng, 3.0f);
  std::vector<uint32_t> masks(size_t(2) * words, 0);
  for (int t = 0; t < vocab; t += 7) masks[t / 32] |= 1u << (t % 32);   // mask 0: every 7th token
  masks[size_t(words) + 999 / 32] |= 1u << (999 % 32);                   // mask 1: only the last token
  const std::vector<int32_t> index = {0, -1, 1, 0, -1, 1};
  DeviceBuffer dl = testing::upload(logits), dm = testing::upload(masks), di = testing::upload(index);
  apply_token_masks(dl.get<float>(), n, vocab, di.get<int32_t>(), dm.get<uint32_t>(), words, nullptr);
  const std::vector<float> got = testing::download<float>(dl, size_t(n) * vocab);
  std::vector<float> want = logits;
  apply_token_masks_ref(want, n, vocab, index, masks, words);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
  std::vector<SampleParams> ps(n);
  for (int i = 0; i < n; ++i) ps[i] = {i < 3 ? 0.0f : 1.0f, 0, 1.0f, uint64_t(i), 0, i};
  const std::vector<int32_t> tokens = run_sampler(got, vocab, ps);
  for (int i = 0; i < n; ++i) {
    if (index[i] == 0) EXPECT_EQ(tokens[i] % 7, 0) << "row " << i;
    if (index[i] == 1) EXPECT_EQ(tokens[i], 999) << "row " << i;
  }
}

TEST(SamplingGpu, DifferentSeedsGiveDifferentDraws) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const int vocab = 1000, n = 64;
  const std::vector<float> row = testing::random_bf16(vocab, rng, 1.0f);
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<SampleParams> ps(n);
  for (int i = 0; i < n; ++i) {
    ps[i].temperature = 1.0f;
    ps[i].seed = 1000 + i;
  }
  const std::vector<int32_t> t = run_sampler(logits, vocab, ps);
  EXPECT_GT(std::set<int32_t>(t.begin(), t.end()).size(), 20u);
}

/// g's [m, k] x [n, k]ᵀ product of random operands against gemm_ref, within the dtype's tolerance.
void expect_product(Gemm& g, ScalarType t, int m, int n, int k, std::mt19937_64& rng) {
    const std::vector<float> x = testing::random16(t, size_t(m) * k, rng), w = testing::random16(t, size_t(n) * k, rng, 0.02f);
    std::vector<float> ref(size_t(m) * n);
    gemm_ref(x.data(), w.data(), m, n, k, ref.data());
    DeviceBuffer dx = testing::upload16(t, x), dw = testing::upload16(t, w), y(ref.size() * 2);
    y.poison();
    g.run(t, dx.get(), dw.get(), y.get(), m, n, k, false, nullptr);
    EXPECT_LT(testing::rel_error(testing::download16(t, y, ref.size()), ref), testing::tolerance(t)) << m;
}

/// cuBLASLt products in bf16 and in fp16 (names end in /bf16 and /f16).
class GemmGpu : public ::testing::TestWithParam<ScalarType> {};

TEST_P(GemmGpu, MatchesReferenceAndRowsAreBatchInvariant) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const int n = 896, k = 4864;
  Gemm plain(false), invariant(true);
  for (int m : {1, 17, 300}) {
    const std::vector<float> x = testing::random16(t, size_t(m) * k, rng), w = testing::random16(t, size_t(n) * k, rng, 0.02f);
    std::vector<float> ref(size_t(m) * n);
    gemm_ref(x.data(), w.data(), m, n, k, ref.data());
    DeviceBuffer dx = testing::upload16(t, x), dw = testing::upload16(t, w), y(ref.size() * 2), yf(ref.size() * 4);
    y.poison();
    yf.poison();
    plain.run(t, dx.get(), dw.get(), y.get(), m, n, k, false, nullptr);
    invariant.run(t, dx.get(), dw.get(), yf.get(), m, n, k, true, nullptr);
    EXPECT_LT(testing::rel_error(testing::download16(t, y, ref.size()), ref), testing::tolerance(t)) << m;
    const std::vector<float> all = testing::download<float>(yf, ref.size());
    EXPECT_LT(testing::rel_error(all, ref), 1e-3) << m;
    // Row 0 alone gives the same bits in invariant mode.
    DeviceBuffer y1(n * 4);
    invariant.run(t, dx.get(), dw.get(), y1.get(), 1, n, k, true, nullptr);
    const std::vector<float> one = testing::download<float>(y1, n);
    EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin())) << m;
  }
}

// Gemm::prepare asks cuBLASLt once per row bucket; later products of any row count up to the
// prepared one take their bucket's algorithm (correct results) without asking again.
TEST_P(GemmGpu, PreparedRowBucketsServeNewRowCountsWithoutNewQueries) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const int n = 384, k = 512;
  Gemm g(false);
  g.prepare(t, 800, n, k, false);
  const int64_t asked = g.heuristic_queries();
  EXPECT_GT(asked, 40);  // 9..64 exact, then the buckets up to 800
  for (int m : {9, 65, 100, 333, 513, 777}) expect_product(g, t, m, n, k, rng);
  EXPECT_EQ(g.heuristic_queries(), asked) << "every row count took its prepared bucket's algorithm";
}

// Autotuning (Gemm::set_autotune): prepare() times cuBLASLt's candidates for the buckets up to the
// limit (and only those); whichever it keeps computes the product.
TEST_P(GemmGpu, AutotunedBucketsComputeTheProduct) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const int n = 1024, k = 2048;
  Gemm g(false);
  g.set_autotune(40);
  g.prepare(t, 100, n, k, false);
  const Gemm::AutotuneStats& a = g.autotune_stats();
  EXPECT_EQ(a.tuned + a.skipped, 40 - 8);  // buckets 9..40 (gemv takes <= 8 rows); 41..100 untimed
  EXPECT_EQ(a.skipped, 0);
  EXPECT_LE(a.changed, a.tuned);
  EXPECT_GE(a.gain_sum, double(a.tuned) * (1.0 - 1e-9));  // the fastest is never slower than the first
  for (int m : {9, 32, 40, 64}) expect_product(g, t, m, n, k, rng);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemmGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace
}  // namespace servelab::kernels
