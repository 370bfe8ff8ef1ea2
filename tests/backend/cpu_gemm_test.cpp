// The CPU backend's dense layers on its pool: tiling covers every output once, the split GEMM
// equals a plain loop on awkward sizes, and OpenBLAS is left single-threaded with kernels that
// match the CPU.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/cpu_gemm.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

TEST(GemmTiling, ItemsCoverEveryOutputOnceInAlignedColumnBlocks) {
  for (int rows : {1, 7, 128, 300})
    for (int n_out : {16, 96, 1000})
      for (int align : {1, 16, 32})
        for (int threads : {1, 2, 16}) {
          if (n_out % align != 0) continue;
          const GemmTiling t = GemmTiling::make(rows, 64, n_out, align, threads);
          std::vector<int> hits(size_t(rows) * n_out, 0);
          for (int64_t i = 0; i < t.n_items(); ++i) {
            int r0, r1, c0, c1;
            t.item(i, r0, r1, c0, c1);
            ASSERT_EQ(c0 % align, 0);
            ASSERT_EQ((c1 - c0) % align, 0) << "a block must hold whole heads";
            for (int r = r0; r < r1; ++r)
              for (int c = c0; c < c1; ++c) ++hits[size_t(r) * n_out + c];
          }
          for (int h : hits) ASSERT_EQ(h, 1) << rows << "x" << n_out << " align " << align << " threads " << threads;
        }
}

TEST(ParallelGemm, EqualsAPlainLoopOnAwkwardSizes) {
  ThreadPool pool(3);
  for (int rows : {1, 17, 300})
    for (int n_out : {97, 1000}) {
      const int n_in = 67;
      const std::vector<float> in = testing::normal_floats(size_t(rows) * n_in, 1);
      const std::vector<float> w = testing::normal_floats(size_t(n_out) * n_in, 2);
      const std::vector<float> init = testing::normal_floats(size_t(rows) * n_out, 3);
      for (bool accumulate : {false, true}) {
        std::vector<float> out = init;
        parallel_gemm_nt(pool, in.data(), rows, n_in, w.data(), n_out, out.data(), accumulate);
        std::vector<float> expected(out.size());
        for (int r = 0; r < rows; ++r)
          for (int o = 0; o < n_out; ++o) {
            double acc = accumulate ? init[size_t(r) * n_out + o] : 0.0;
            for (int i = 0; i < n_in; ++i) acc += double(in[size_t(r) * n_in + i]) * w[size_t(o) * n_in + i];
            expected[size_t(r) * n_out + o] = static_cast<float>(acc);
          }
        EXPECT_LT(testing::rel_error(out, expected), 1e-5) << rows << "x" << n_out << " accumulate " << accumulate;
      }
    }
}

TEST(ParallelGemm, BackendLeavesOpenBlasSingleThreadedOnKernelsForThisCpu) {
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 2});
  EXPECT_EQ(blas_threads(), 1) << "OpenBLAS threads would spin beside the pool";
#if defined(__GNUC__) && defined(__x86_64__)
  // Prescott (SSE3) is what OpenBLAS falls back to on CPUs it does not know.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !std::getenv("OPENBLAS_CORETYPE")) {
    EXPECT_NE(blas_core(), "Prescott");
  }
#endif
}

}  // namespace
}  // namespace servelab
