// The skinny GEMM (gemv.cu) against gemm_ref: awkward shapes through Gemm::run (which routes
// M <= gemv_rows() to it: here 16, one column tile of 8 rows of x or two) in bf16 and fp16, 16-bit and fp32 outputs, accumulate, outputs poisoned and guarded past the end;
// forced K splits (deterministic, counters left zeroed, replayable from a CUDA graph); a row's
// bits independent of M; and Gemm's routing (fallbacks to cuBLASLt).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/gemm.h"
#include "kernels/ref/ops_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace gemv_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;

/// n uniform values in [-scale, scale) as bf16 (or fp16) bits (a fast generator: the weights run to 131M values).
std::vector<uint16_t> random_bits(size_t n, uint64_t seed, float scale, ScalarType t = ScalarType::bf16) {
  std::vector<uint16_t> v(n);
  uint64_t s = seed;
  for (uint16_t& e : v) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float x = ((z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
    e = t == ScalarType::bf16 ? f32_to_bf16(x) : f32_to_f16(x);
  }
  return v;
}

float bits_to_float(uint16_t b, ScalarType t) { return t == ScalarType::bf16 ? bf16_to_f32(b) : f16_to_f32(b); }

std::vector<float> to_float(const std::vector<uint16_t>& b, ScalarType t = ScalarType::bf16) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bits_to_float(b[i], t);
  return f;
}

/// Output rows (of w) to check against the reference: all of a small n, else both ends (the first
/// and last row blocks) and a random sample.
std::vector<int> rows_to_check(int n, std::mt19937_64& rng) {
  std::vector<int> r;
  for (int i = 0; i < n; ++i)
    if (n <= 96 || i < 40 || i >= n - 40) r.push_back(i);
  std::uniform_int_distribution<int> pick(0, n - 1);
  if (n > 96)
    for (int i = 0; i < 32; ++i) r.push_back(pick(rng));
  return r;
}

constexpr int kGuard = 64;  // poisoned elements after y: nothing may write there

/// One product through `gemm` with fresh x (and fresh y when accumulating), checked on `rows`
/// against gemm_ref, every output written and finite, the guard untouched.
void check_product(ScalarType t, Gemm& gemm, const DeviceBuffer& dw, const std::vector<uint16_t>& w, int m, int n,
                   int k, bool out_fp32, bool accumulate, const std::vector<int>& rows, std::mt19937_64& rng) {
  SCOPED_TRACE("M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
               (t == ScalarType::bf16 ? " bf16" : " f16") + (out_fp32 ? " fp32 out" : "") +
               (accumulate ? " accumulate" : ""));
  ASSERT_TRUE(gemm.uses_gemv(t, dw.get(), dw.get(), m, n, k));
  const std::vector<uint16_t> xb = random_bits(size_t(m) * k, rng(), 1.0f, t);
  const std::vector<float> xf = to_float(xb, t);
  const size_t out_elems = size_t(m) * n, esize = out_fp32 ? 4 : 2;
  DeviceBuffer dx = testing::upload(xb), dy((out_elems + kGuard) * esize);
  dy.poison();
  std::vector<float> y0(out_elems, 0.0f);
  if (accumulate) {  // a random y, uploaded in the output type
    const std::vector<uint16_t> yb = random_bits(out_elems, rng(), 4.0f, t);
    y0 = to_float(yb, t);
    if (out_fp32) CUDA_CHECK(cudaMemcpy(dy.get(), y0.data(), out_elems * 4, cudaMemcpyHostToDevice));
    else CUDA_CHECK(cudaMemcpy(dy.get(), yb.data(), out_elems * 2, cudaMemcpyHostToDevice));
  }
  gemm.run(t, dx.get(), dw.get(), dy.get(), m, n, k, out_fp32, nullptr, accumulate);
  CUDA_CHECK(cudaGetLastError());

  std::vector<float> got(out_elems + kGuard);
  if (out_fp32) {
    got = testing::download<float>(dy, out_elems + kGuard);
  } else {
    const std::vector<uint16_t> h = testing::download<uint16_t>(dy, out_elems + kGuard);
    for (size_t i = 0; i < h.size(); ++i) got[i] = bits_to_float(h[i], t);
  }
  size_t non_finite = 0;
  for (size_t i = 0; i < out_elems; ++i) non_finite += !std::isfinite(got[i]);
  EXPECT_EQ(non_finite, 0u) << "outputs left unwritten (poison) or not finite";
  for (int i = 0; i < kGuard; ++i) ASSERT_TRUE(std::isnan(got[out_elems + i])) << "write past the end at " << i;

  // Reference on the chosen rows of w.
  const int nr = static_cast<int>(rows.size());
  std::vector<float> wsub(size_t(nr) * k), ref(size_t(m) * nr), mine(size_t(m) * nr);
  for (int j = 0; j < nr; ++j)
    for (int p = 0; p < k; ++p) wsub[size_t(j) * k + p] = bits_to_float(w[size_t(rows[j]) * k + p], t);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < nr; ++j) {
      ref[size_t(i) * nr + j] = y0[size_t(i) * n + rows[j]];
      mine[size_t(i) * nr + j] = got[size_t(i) * n + rows[j]];
    }
  gemm_ref(xf.data(), wsub.data(), m, nr, k, ref.data(), accumulate, out_fp32 ? nullptr : testing::rounding(t));
  EXPECT_LT(testing::rel_error(mine, ref), out_fp32 ? 1e-3 : testing::tolerance(t));
}

/// The awkward-shapes check runs in bf16 and in fp16 (names end in /bf16 and /f16).
class GemvGpuDtype : public ::testing::TestWithParam<ScalarType> {};

TEST_P(GemvGpuDtype, MatchesReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
#if !defined(SERVELAB_KERNELS_FP16)
  if (t == ScalarType::f16) GTEST_SKIP() << "built with -DSERVELAB_KERNELS_FP16=OFF: gemv has no f16 variant";
#endif
  std::mt19937_64 rng(std::random_device{}());
  Gemm gemm(false);
  gemm.set_gemv_rows(gemv::kMaxM);  // run() takes gemv's two column tiles too
  const std::vector<std::pair<int, int>> nk = {{1, 8},       {1, 4096},    {1, 11008},   {17, 8},   {17, 1000},
                                               {17, 4096},   {17, 11008},  {100, 4104},  {4096, 8}, {4096, 4096},
                                               {4096, 11008}, {32000, 8}, {32000, 4096}};
  for (const auto& [n, k] : nk) {
    const std::vector<uint16_t> w = random_bits(size_t(n) * k, rng(), 1.0f, t);
    DeviceBuffer dw = testing::upload(w);
    const std::vector<int> rows = rows_to_check(n, rng);
    for (int m : {1, 3, 8, 9, 16})
      for (int mode = 0; mode < 4; ++mode)  // 16-bit / fp32 out, with and without accumulate
        check_product(t, gemm, dw, w, m, n, k, mode % 2 == 1, mode / 2 == 1, rows, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemvGpuDtype, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

/// K split as forced, m rows (one column tile of x, or two), against the reference.
void forced_splits(int m) {
  SCOPED_TRACE("M=" + std::to_string(m));
  std::mt19937_64 rng(std::random_device{}());
  const int n = 100, k = 4104;  // a partial last K step
  const std::vector<uint16_t> w = random_bits(size_t(n) * k, rng(), 1.0f), x = random_bits(size_t(m) * k, rng(), 1.0f);
  std::vector<float> ref(size_t(m) * n);
  gemm_ref(to_float(x).data(), to_float(w).data(), m, n, k, ref.data());
  DeviceBuffer dw = testing::upload(w), dx = testing::upload(x), dy(ref.size() * 4);
  DeviceBuffer partials(size_t(Gemm::kGemvPartialFloats) * 8), counters(Gemm::kGemvCounters * 8);  // two tiles
  CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  for (int splits : {1, 2, 3, 7, 65, 80}) {  // 80 > k steps: empty slices add zeros
    SCOPED_TRACE("splits " + std::to_string(splits));
    gemv::Plan plan = gemv::make_plan(n, k, 1, 1, 0, 0);
    plan.splits = splits;
    std::vector<float> first;
    for (int rep = 0; rep < 2; ++rep) {
      dy.poison();
      run_gemv(ScalarType::bf16, dx.get(), dw.get(), dy.get(), m, n, k, true, false, plan, partials.get<float>(),
               counters.get<int32_t>(), nullptr);
      const std::vector<float> got = testing::download<float>(dy, ref.size());
      EXPECT_LT(testing::rel_error(got, ref), 1e-4);  // fp32 sums (tensor-core adds may truncate)
      if (rep == 0) first = got;
      else EXPECT_EQ(got, first) << "same inputs, same plan, same bits";
    }
    const std::vector<int32_t> c = testing::download<int32_t>(counters, 2 * size_t(plan.row_blocks));
    EXPECT_EQ(c, std::vector<int32_t>(2 * size_t(plan.row_blocks), 0)) << "counters must be left zeroed";
  }

  // Captured once, replayed three times: the counters reset themselves between replays.
  gemv::Plan plan = gemv::make_plan(n, k, 1, 1, 0, 0);
  plan.splits = 4;
  testing::CapturedGraph graph([&](cudaStream_t st) {
    run_gemv(ScalarType::bf16, dx.get(), dw.get(), dy.get(), m, n, k, true, false, plan, partials.get<float>(),
             counters.get<int32_t>(), st);
  });
  for (int rep = 0; rep < 3; ++rep) {
    dy.poison();
    graph.replay();
    EXPECT_LT(testing::rel_error(testing::download<float>(dy, ref.size()), ref), 1e-4) << "replay " << rep;
  }
}

TEST(GemvGpu, ForcedSplitsAgreeAreDeterministicAndReplayFromAGraph) {
  SKIP_WITHOUT_GPU();
  forced_splits(5);
  forced_splits(13);
}

TEST(GemvGpu, RowResultDoesNotDependOnM) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const int n = 4096, k = 4096;  // split into 4 on an H100
  const std::vector<uint16_t> w = random_bits(size_t(n) * k, rng(), 1.0f), x = random_bits(size_t(16) * k, rng(), 1.0f);
  DeviceBuffer dw = testing::upload(w), dx = testing::upload(x), y1(size_t(n) * 4), y8(size_t(8) * n * 4),
      y16(size_t(16) * n * 4);
  Gemm gemm(false);
  gemm.set_gemv_rows(gemv::kMaxM);
  gemm.run(ScalarType::bf16, dx.get(), dw.get(), y1.get(), 1, n, k, true, nullptr);
  gemm.run(ScalarType::bf16, dx.get(), dw.get(), y8.get(), 8, n, k, true, nullptr);
  gemm.run(ScalarType::bf16, dx.get(), dw.get(), y16.get(), 16, n, k, true, nullptr);
  const std::vector<float> one = testing::download<float>(y1, n), eight = testing::download<float>(y8, size_t(8) * n),
                           sixteen = testing::download<float>(y16, size_t(16) * n);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), eight.begin()));
  EXPECT_TRUE(std::equal(eight.begin(), eight.end(), sixteen.begin())) << "rows 0-7 in one column tile of two";
  // Row 8 of a 16-row product (the second tile's first row) is row 0 of the 8-row product of x's rows 8-15.
  gemm.run(ScalarType::bf16, dx.get<uint16_t>() + size_t(8) * k, dw.get(), y8.get(), 8, n, k, true, nullptr);
  const std::vector<float> upper = testing::download<float>(y8, size_t(8) * n);
  EXPECT_TRUE(std::equal(upper.begin(), upper.end(), sixteen.begin() + size_t(8) * n)) << "rows 8-15";
}

TEST(GemvGpu, GemmRoutesSkinnyProductsAndFallsBack) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const int n = 896, k = 4864;
  const std::vector<uint16_t> w = random_bits(size_t(n) * k, rng(), 0.05f), x = random_bits(size_t(17) * k, rng(), 1.0f);
  DeviceBuffer dw = testing::upload(w), dx = testing::upload(x);
  const char* xp = dx.get<char>();
  Gemm on(false), off(false, 32u << 20, false), invariant(true);
  EXPECT_TRUE(on.uses_gemv(ScalarType::bf16, xp, dw.get(), 8, n, k));
  EXPECT_FALSE(on.uses_gemv(ScalarType::bf16, xp, dw.get(), 9, n, k));  // M > gemv_rows() (8)
  EXPECT_TRUE(on.uses_gemv(ScalarType::bf16, xp, dw.get(), 16, n, k, true));  // a LoRA epilogue: two column tiles
  EXPECT_FALSE(on.uses_gemv(ScalarType::bf16, xp, dw.get(), 17, n, k, true));  // M > 16
  on.set_gemv_rows(16);
  EXPECT_TRUE(on.uses_gemv(ScalarType::bf16, xp, dw.get(), 16, n, k));
  on.set_gemv_rows(40);
  EXPECT_EQ(on.gemv_rows(), gemv::kMaxM);
  on.set_gemv_rows(gemv::kMaxRows);
  EXPECT_FALSE(on.uses_gemv(ScalarType::bf16, xp, dw.get(), 1, n, 12));  // K not a multiple of 8
  EXPECT_FALSE(on.uses_gemv(ScalarType::bf16, xp + 2, dw.get(), 1, n, k - 8));  // x not 16-byte aligned
  EXPECT_FALSE(off.uses_gemv(ScalarType::bf16, xp, dw.get(), 1, n, k));
  EXPECT_FALSE(invariant.uses_gemv(ScalarType::bf16, xp, dw.get(), 1, n, k));
  off.set_use_gemv(true);
  EXPECT_TRUE(off.uses_gemv(ScalarType::bf16, xp, dw.get(), 1, n, k));
  off.set_use_gemv(false);

  // Both paths on the same inputs, against the reference (M = 12 and 17 go to cuBLASLt either way).
  for (int m : {3, 12, 17}) {
    std::vector<float> ref(size_t(m) * n);
    gemm_ref(to_float(x).data(), to_float(w).data(), m, n, k, ref.data());
    for (Gemm* g : {&on, &off}) {
      DeviceBuffer dy(ref.size() * 4);
      dy.poison();
      g->run(ScalarType::bf16, xp, dw.get(), dy.get(), m, n, k, true, nullptr);
      EXPECT_LT(testing::rel_error(testing::download<float>(dy, ref.size()), ref), 1e-3) << m;
    }
  }
}

}  // namespace gemv_gpu_test
}  // namespace servelab::kernels
