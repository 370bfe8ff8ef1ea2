// kernels/ref/kv_fp8_ref.h: the FP8 KV row quantization is the CPU backend's (scale amax / 448,
// codes round to nearest even), read back within E4M3's half step, and the GPU arena layout
// (pages of 16 slots split by head: 16 rows of codes, then their 16 scales) round-trips.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/fp8.h"
#include "kernels/ref/kv_fp8_ref.h"

namespace servelab::kernels {
namespace kv_fp8_ref_test {

TEST(KvFp8Ref, RowScaleIsAmaxOver448AndCodesRoundToNearest) {
  std::vector<float> row = {448.0f, -224.0f, 1.0f, 0.0f, 17.0f, -0.001f, 3.3f, 100.0f};
  std::vector<uint8_t> codes(row.size());
  EXPECT_EQ(quantize_kv_row_fp8_ref(row.data(), 8, codes.data()), 1.0f);
  for (size_t i = 0; i < row.size(); ++i) EXPECT_EQ(codes[i], f32_to_fp8_e4m3(row[i])) << i;
  EXPECT_EQ(codes[0], 0x7e);  // 448: the largest finite code
  EXPECT_EQ(codes[4], f32_to_fp8_e4m3(16.0f));  // 17 rounds to 16 (steps of 2 in [16, 32)), ties to even
  const std::vector<float> zero(8, 0.0f);
  EXPECT_EQ(quantize_kv_row_fp8_ref(zero.data(), 8, codes.data()), 1.0f);  // an all-zero row: scale 1, codes 0
  for (uint8_t c : codes) EXPECT_EQ(c, 0);
}

TEST(KvFp8Ref, ReadBackIsWithinHalfAStepOfE4m3) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int hd : {32, 64, 128}) {
    std::vector<float> row(hd), back(hd);
    for (float& x : row) x = d(rng);
    std::vector<uint8_t> codes(hd);
    const float scale = quantize_kv_row_fp8_ref(row.data(), hd, codes.data());
    dequantize_kv_row_fp8_ref(codes.data(), scale, hd, back.data());
    for (int i = 0; i < hd; ++i)  // relative 2^-4 for normals, 2^-10 * scale absolute below 2^-6
      EXPECT_LE(std::fabs(back[i] - row[i]), std::max(std::fabs(row[i]) / 16.0f, scale / 1024.0f) * 1.0001f) << i;
  }
}

TEST(KvFp8Ref, ArenaLayoutIsPagesOf16SlotsSplitByHead) {
  EXPECT_EQ(kv_fp8_slot_bytes_ref(2, 32), 64 + 16);    // tiny: 8 bytes of scales, 8 of padding
  EXPECT_EQ(kv_fp8_slot_bytes_ref(32, 128), 4096 + 128);  // llama2-7b: no padding
  EXPECT_EQ(kv_fp8_slot_bytes_ref(8, 128), 1024 + 32);
  EXPECT_EQ(kv_fp8_slot_bytes_ref(1, 128), 128 + 16);
  EXPECT_EQ(kv_fp8_arena_slots_ref(1), 16);
  EXPECT_EQ(kv_fp8_arena_slots_ref(16), 16);
  EXPECT_EQ(kv_fp8_arena_slots_ref(21), 32);
  // llama2-7b: a page is 16 x 4224 bytes; head 3 of slot 37 (page 2, row 5): its codes after heads
  // 0-2's 16 x (128 + 4) bytes and 5 rows, its scale after its 16 rows and 5 scales.
  EXPECT_EQ(kv_fp8_codes_at_ref(37, 3, 32, 128), 2 * 16 * 4224 + 3 * 16 * 132 + 5 * 128);
  EXPECT_EQ(kv_fp8_scale_at_ref(37, 3, 32, 128), 2 * 16 * 4224 + 3 * 16 * 132 + 16 * 128 + 5 * 4);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const KvShape shape{21, 2, 32};  // tiny: a page and 5 slots; a page is 16 x 80 bytes, 2 x 16 x 36 used
  std::vector<float> cache(size_t(shape.n_slots * shape.row_elems()));
  for (float& x : cache) x = d(rng);
  const std::vector<uint8_t> arena = kv_fp8_pack_ref(cache, shape);
  ASSERT_EQ(arena.size(), size_t(32 * 80));
  std::vector<int> touched(arena.size(), 0);
  for (int64_t s = 0; s < shape.n_slots; ++s)
    for (int h = 0; h < 2; ++h) {
      std::vector<uint8_t> codes(32);
      const float scale = quantize_kv_row_fp8_ref(cache.data() + (s * 2 + h) * 32, 32, codes.data());
      const int64_t at = (s / 16) * 1280 + h * 16 * 36 + (s % 16) * 32, sat = (s / 16) * 1280 + h * 16 * 36 + 512 + (s % 16) * 4;
      EXPECT_EQ(0, std::memcmp(arena.data() + at, codes.data(), 32));
      float stored;
      std::memcpy(&stored, arena.data() + sat, 4);
      EXPECT_EQ(stored, scale);
      for (int b = 0; b < 32; ++b) ++touched[size_t(at + b)];
      for (int b = 0; b < 4; ++b) ++touched[size_t(sat + b)];
    }
  for (size_t b = 0; b < arena.size(); ++b) {
    EXPECT_LE(touched[b], 1) << "byte " << b << " holds two things";
    if (!touched[b]) {
      EXPECT_EQ(arena[b], 0) << "padding or unused slot, byte " << b;
    }
  }
  const std::vector<float> back = kv_fp8_unpack_ref(arena, shape);
  for (size_t i = 0; i < cache.size(); ++i) EXPECT_NEAR(back[i], cache[i], std::fabs(cache[i]) / 16.0f + 1e-3f) << i;
}

}  // namespace kv_fp8_ref_test
}  // namespace servelab::kernels
