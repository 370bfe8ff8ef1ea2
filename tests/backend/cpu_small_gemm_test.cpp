// The small-rows GEMM loop (decode batches on the CPU backend): equal to a plain loop on awkward
// sizes for every instruction set this CPU has, a row's bits independent of the rows beside it,
// and gemm_nt's padded sgemm path (rows % 4 == 3 above the loop's range) equal to the loop too.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cpu_gemm.h"
#include "engine/backend/cpu_small_gemm.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

using GemmFn = void (*)(const float*, int, int, const float*, int, float*, int, bool);

/// The loops this CPU can run, by name (none on a CPU without AVX2: the tests then skip).
std::vector<std::pair<std::string, GemmFn>> loops_here() {
  std::vector<std::pair<std::string, GemmFn>> loops;
#if defined(__GNUC__) && defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) loops.emplace_back("avx512", small_rows_gemm_avx512);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) loops.emplace_back("avx2", small_rows_gemm_avx2);
#endif
  return loops;
}

/// out (ldo columns apart) against Σ in · wᵀ in double, + init where accumulate.
double error_against_loop(const std::vector<float>& out, const std::vector<float>& init, const std::vector<float>& in,
                          const std::vector<float>& w, int rows, int n_in, int n_cols, int ldo, bool accumulate) {
  std::vector<float> got, want;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < n_cols; ++c) {
      double acc = accumulate ? init[size_t(r) * ldo + c] : 0.0;
      for (int i = 0; i < n_in; ++i) acc += double(in[size_t(r) * n_in + i]) * w[size_t(c) * n_in + i];
      want.push_back(static_cast<float>(acc));
      got.push_back(out[size_t(r) * ldo + c]);
    }
  return testing::rel_error(got, want);
}

TEST(SmallRowsGemm, EqualsAPlainLoopOnAwkwardSizesForEachInstructionSet) {
  const auto loops = loops_here();
  if (loops.empty()) GTEST_SKIP() << "this CPU has neither AVX-512F nor AVX2 with FMA";
  for (const auto& [isa, fn] : loops)
    for (int rows = 1; rows <= kSmallGemmMaxRows; ++rows)
      for (int n_in : {5, 16, 67, 896})
        for (int n_cols : {1, 3, 6, 97}) {
          const int ldo = n_cols + 3;  // the outputs of a row are not adjacent to the next row's
          const std::vector<float> in = testing::normal_floats(size_t(rows) * n_in, 1);
          const std::vector<float> w = testing::normal_floats(size_t(n_cols) * n_in, 2);
          const std::vector<float> init = testing::normal_floats(size_t(rows) * ldo, 3);
          for (bool accumulate : {false, true}) {
            std::vector<float> out = init;
            fn(in.data(), rows, n_in, w.data(), n_cols, out.data(), ldo, accumulate);
            EXPECT_LT(error_against_loop(out, init, in, w, rows, n_in, n_cols, ldo, accumulate), 1e-5)
                << isa << " rows " << rows << " n_in " << n_in << " n_cols " << n_cols << " accumulate " << accumulate;
            for (int r = 0; r < rows; ++r)  // the gap between rows untouched
              for (int c = n_cols; c < ldo; ++c) ASSERT_EQ(out[size_t(r) * ldo + c], init[size_t(r) * ldo + c]) << isa;
          }
        }
}

TEST(SmallRowsGemm, ARowsBitsDoNotDependOnTheRowsBesideIt) {
  const int n_in = 203, n_cols = 37;
  const std::vector<float> in = testing::normal_floats(size_t(kSmallGemmMaxRows) * n_in, 4);
  const std::vector<float> w = testing::normal_floats(size_t(n_cols) * n_in, 5);
  for (const auto& [isa, fn] : loops_here()) {
    std::vector<float> alone(n_cols);
    fn(in.data(), 1, n_in, w.data(), n_cols, alone.data(), n_cols, false);
    for (int rows = 2; rows <= kSmallGemmMaxRows; ++rows) {
      std::vector<float> out(size_t(rows) * n_cols);
      fn(in.data(), rows, n_in, w.data(), n_cols, out.data(), n_cols, false);
      for (int c = 0; c < n_cols; ++c) ASSERT_EQ(out[c], alone[c]) << isa << " row 0 of " << rows << ", column " << c;
    }
  }
}

TEST(SmallRowsGemm, GemmNtTakesTheLoopUpToItsRowLimitAndSgemmAbove) {
  const bool have_loop = !small_gemm_isa().empty();
  const int n_in = 40, n_cols = 24;
  const std::vector<float> w = testing::normal_floats(size_t(n_cols) * n_in, 6);
  for (int rows : {1, 2, 3, kSmallGemmMaxRows, kSmallGemmMaxRows + 1, 15, 19}) {
    const std::vector<float> in = testing::normal_floats(size_t(rows) * n_in, 7);
    const std::vector<float> init = testing::normal_floats(size_t(rows) * (n_cols + 2), 8);
    for (bool accumulate : {false, true}) {
      std::vector<float> out = init;
      gemm_nt(in.data(), rows, n_in, w.data(), n_cols, out.data(), n_cols + 2, accumulate);  // 15, 19: padded sgemm
      EXPECT_LT(error_against_loop(out, init, in, w, rows, n_in, n_cols, n_cols + 2, accumulate), 1e-5)
          << rows << " rows, accumulate " << accumulate;
      for (int r = 0; r < rows; ++r)
        for (int c = n_cols; c < n_cols + 2; ++c) ASSERT_EQ(out[size_t(r) * (n_cols + 2) + c], init[size_t(r) * (n_cols + 2) + c]);
    }
    std::vector<float> via_loop(size_t(rows) * n_cols);
    EXPECT_EQ(small_rows_gemm_nt(in.data(), rows, n_in, w.data(), n_cols, via_loop.data(), n_cols, false),
              have_loop && rows <= kSmallGemmMaxRows)
        << rows << " rows";
  }
}

}  // namespace
}  // namespace servelab
