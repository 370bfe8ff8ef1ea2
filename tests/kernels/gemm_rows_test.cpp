// The row buckets Gemm chooses cuBLASLt algorithms for (kernels/gemm_rows.h): every row count maps
// to a bucket at least as large, decode batches and CUDA-graph buckets keep their exact choice, the
// bucket list covers every row count up to its end, and stays short enough to warm at start-up.
#include "kernels/gemm_rows.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace servelab::kernels {
namespace {

TEST(GemmRows, BucketsCoverEveryRowCountFromAboveAndKeepGraphBucketsExact) {
  for (int m = 1; m <= 64; ++m) EXPECT_EQ(gemm_rows_bucket(m), m);
  for (int m : {96, 128, 160, 192, 256, 320, 384, 448, 512}) EXPECT_EQ(gemm_rows_bucket(m), m) << m;
  EXPECT_EQ(gemm_rows_bucket(65), 96);
  EXPECT_EQ(gemm_rows_bucket(513), 640);
  EXPECT_EQ(gemm_rows_bucket(4097), 4608);
  int last = 0;
  for (int m = 1; m <= 40000; ++m) {
    const int b = gemm_rows_bucket(m);
    ASSERT_GE(b, m);
    ASSERT_GE(b, last) << "monotonic";
    ASSERT_LT(b - m, 512) << m;
    ASSERT_EQ(gemm_rows_bucket(b), b) << "a bucket is its own bucket";
    last = b;
  }
}

TEST(GemmRows, TheWarmListHoldsTheBucketOfEveryRowCount) {
  const std::vector<int> list = gemm_rows_buckets(9, 4096);
  EXPECT_TRUE(std::is_sorted(list.begin(), list.end()));
  EXPECT_EQ(list.front(), 9);
  EXPECT_EQ(list.back(), 4096);
  for (int m = 9; m <= 4096; ++m)
    ASSERT_TRUE(std::binary_search(list.begin(), list.end(), gemm_rows_bucket(m))) << m;
  EXPECT_LT(list.size(), 100u) << "warmed at start-up: a few hundred heuristic queries at most";
  EXPECT_EQ(gemm_rows_buckets(1, 5).size(), 5u);
  EXPECT_TRUE(gemm_rows_buckets(10, 9).empty());
  EXPECT_EQ(gemm_rows_buckets(0, 1), std::vector<int>{1});
}

}  // namespace
}  // namespace servelab::kernels
