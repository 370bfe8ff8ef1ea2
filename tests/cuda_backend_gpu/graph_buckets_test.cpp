// The decode graphs' keys (engine/backend/cuda/graph_buckets.h): host code, no device needed.
#include <gtest/gtest.h>

#include "engine/backend/cuda/graph_buckets.h"

namespace servelab::cuda_impl {
namespace {

TEST(GraphBuckets, AStepsMeanContextPlansItsAttentionByHalfOctaves) {
  // 16 sequences of a 4096 bucket: the mean rounded up to 256, 384, 512, 768, 1024, 1536, 2048, 3072.
  EXPECT_EQ(plan_bucket(16 * 100, 16, 4096), 256);
  EXPECT_EQ(plan_bucket(16 * 257, 16, 4096), 384);
  EXPECT_EQ(plan_bucket(16 * 600, 16, 4096), 768);
  EXPECT_EQ(plan_bucket(16 * 1024, 16, 4096), 1024);
  EXPECT_EQ(plan_bucket(16 * 1025, 16, 4096), 1536);
  EXPECT_EQ(plan_bucket(16 * 2556, 16, 4096), 3072);
  // A mean past the last half octave below the bucket plans for the bucket itself (0), as does
  // a step whose contexts already fill it.
  EXPECT_EQ(plan_bucket(16 * 3100, 16, 4096), 0);
  EXPECT_EQ(plan_bucket(16 * 4096, 16, 4096), 0);
  EXPECT_EQ(plan_bucket(300, 1, 256), 0);
  EXPECT_EQ(plan_bucket(0, 0, 4096), 0);
  // The mean is rounded up: 2 sequences of 256 and 257 tokens plan for 384.
  EXPECT_EQ(plan_bucket(513, 2, 1024), 384);
  // Rounded down: the largest half octave at or below the mean, 256 at least.
  EXPECT_EQ(plan_bucket(16 * 2277, 16, 4096, true), 2048);
  EXPECT_EQ(plan_bucket(16 * 3100, 16, 4096, true), 3072);
  EXPECT_EQ(plan_bucket(16 * 1000, 16, 2048, true), 768);
  EXPECT_EQ(plan_bucket(16 * 100, 16, 2048, true), 256);
  EXPECT_EQ(plan_bucket(16 * 300, 16, 256, true), 0);  // a bucket of 256 has nothing below
  // Each plan is below its bucket, so the grid (sized for the bucket) covers every sequence.
  for (int bucket = 256; bucket <= kGraphMaxContext; bucket *= 2)
    for (int64_t mean = 1; mean <= bucket; mean += 37)
      for (bool down : {false, true}) EXPECT_LT(plan_bucket(mean * 8, 8, bucket, down), bucket);
}

}  // namespace
}  // namespace servelab::cuda_impl
