// ProfileRunner (engine/backend/profiler.h) on the cuda backend: the random K/V fill (one chunk
// swapped in from a host pool, repeated by copy_slots) reaches every slot of the GPU arena, and a decode
// point is timed after its warm-up runs (the first captures a CUDA graph). Skipped without a GPU.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/profiler.h"
#include "engine/model/half.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

TEST(ProfileRunnerGpu, FillsTheArenaByCopiesAndTimesADecode) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = CudaBackend::random(preset("tiny"), 1);
  const int64_t slot_bytes = gpu->kv_bytes_per_slot();
  ProfileRunner runner(*gpu, 96, 64, 3, true, 10 * slot_bytes);  // 10 slots loaded, copied to 10..95
  const std::vector<int64_t> s3 = {3}, s93 = {93}, s4 = {4};
  const std::vector<std::byte> a = testing::read_slots(*gpu, s3);
  const std::vector<std::byte> b = testing::read_slots(*gpu, s93);  // 93 <- 3
  const std::vector<std::byte> c = testing::read_slots(*gpu, s4);
  ASSERT_EQ(a.size(), static_cast<size_t>(slot_bytes));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  size_t n_zero = 0, n_out = 0;
  for (size_t i = 0; i + 2 <= b.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, &b[i], 2);
    const float x = bf16_to_f32(h);
    n_zero += x == 0.0f;
    n_out += !(x >= -1.0f && x <= 1.0f);
  }
  EXPECT_LT(n_zero, b.size() / 200);
  EXPECT_EQ(n_out, 0u);

  const ProfileSample s = runner.run(ProfilePoint{ProfilePhase::decode, {{40, 1}, {20, 1}}}, 2, 3, 1e9);
  EXPECT_EQ(s.shape.n_seqs, 2);
  EXPECT_EQ(s.times_s.size(), 3u);
  EXPECT_GT(s.step_s, 0.0);
}

}  // namespace
}  // namespace servelab
