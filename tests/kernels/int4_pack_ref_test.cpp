// INT4's fragment layout (kernels/int4_pack.h) on the CPU: nibble_dest inverts nibble_source over a
// whole chunk; pack_int4_fragments_ref puts every code where nibble_source finds it (rows past N
// zero) with its rows' scales and 128 + zero in the group records; quant_gemv_int4_packed_ref
// on the packed layout equals quant_gemv_ref on the row layout (awkward N, groups of 128 and 256,
// M 1 and 3, accumulate); shapes that cannot be packed are refused.
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/half.h"
#include "kernels/int4_pack.h"
#include "kernels/ref/int4_pack_ref.h"
#include "kernels/ref/quant_gemv_ref.h"

namespace servelab::kernels {
namespace int4_pack_ref_test {

using namespace int4_pack;

TEST(Int4PackRef, NibbleDestInvertsNibbleSource) {
  std::vector<int> seen(kTileRows * kChunkK, 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j)
      for (int e = 0; e < 8; ++e) {
        int r, kc, lane2, j2, e2;
        nibble_source(lane, j, e, r, kc);
        ASSERT_GE(r, 0);
        ASSERT_LT(r, kTileRows);
        ASSERT_GE(kc, 0);
        ASSERT_LT(kc, kChunkK);
        ++seen[size_t(r * kChunkK + kc)];
        nibble_dest(r, kc, lane2, j2, e2);
        EXPECT_EQ(lane2, lane);
        EXPECT_EQ(j2, j);
        EXPECT_EQ(e2, e);
        // a_i = nibbles i and i + 4: rows g (i even) or g + 8 (odd), k0 + 2 (i / 2) and one more
        EXPECT_EQ(r, lane / 4 + 8 * (e & 1));
      }
  for (int c : seen) EXPECT_EQ(c, 1);  // every (row, k) of the chunk exactly once
}

TEST(Int4PackRef, PackedProductMatchesTheRowLayout) {
  std::mt19937_64 rng(26);
  std::uniform_int_distribution<int> nib(0, 15);
  std::uniform_real_distribution<float> pos(0.01f, 0.1f), unit(-1.0f, 1.0f);
  struct Shape {
    int m, n, k, group;
  };
  for (const Shape& sh : {Shape{1, 17, 128, 128}, Shape{3, 40, 384, 128}, Shape{2, 33, 512, 256}}) {
    SCOPED_TRACE("M=" + std::to_string(sh.m) + " N=" + std::to_string(sh.n) + " K=" + std::to_string(sh.k) + " group " +
                 std::to_string(sh.group));
    std::vector<uint8_t> q(size_t(sh.n) * sh.k);
    for (uint8_t& c : q) c = uint8_t(nib(rng));
    const std::vector<uint8_t> codes = pack_int4_rows(q, sh.n, sh.k);
    std::vector<float> scales(size_t(sh.k / sh.group) * sh.n), zeros(scales.size());
    for (float& s : scales) s = pos(rng);
    for (float& z : zeros) z = float(nib(rng));
    const Int4Packed p = pack_int4_fragments_ref(codes.data(), scales.data(), zeros.data(), sh.n, sh.k, sh.group);
    const Layout lay{sh.n, sh.k, sh.group};
    ASSERT_EQ(int64_t(p.codes.size()), lay.code_bytes());
    ASSERT_EQ(int64_t(p.groups.size()) * 4, lay.group_bytes());
    // Every code where nibble_source finds it; the padding rows zero.
    for (int tile = 0; tile < lay.tiles(); ++tile)
      for (int chunk = 0; chunk < lay.chunks(); ++chunk)
        for (int lane = 0; lane < 32; ++lane)
          for (int j = 0; j < 4; ++j) {
            uint32_t w;
            std::memcpy(&w, p.codes.data() + ((int64_t(tile) * lay.chunks() + chunk) * 32 + lane) * 16 + 4 * j, 4);
            for (int e = 0; e < 8; ++e) {
              int r, kc;
              nibble_source(lane, j, e, r, kc);
              const int row = tile * kTileRows + r, col = chunk * kChunkK + kc;
              const uint32_t want = row < sh.n ? q[size_t(row) * sh.k + col] : 0;
              ASSERT_EQ((w >> (4 * e)) & 0xF, want) << "row " << row << " k " << col;
            }
          }
    // Records: scales of rows g, g + 8, then 128 + zero as bf16 pairs.
    for (int tile = 0; tile < lay.tiles(); ++tile)
      for (int gr = 0; gr < lay.groups(); ++gr)
        for (int g = 0; g < 8; ++g)
          for (int h = 0; h < 2; ++h) {
            const uint32_t* rec = p.groups.data() + ((int64_t(tile) * lay.groups() + gr) * 8 + g) * 4;
            const int row = tile * kTileRows + g + 8 * h;
            float s;
            std::memcpy(&s, &rec[h], 4);
            EXPECT_EQ(s, row < sh.n ? scales[size_t(gr) * sh.n + row] : 0.0f);
            const float z = row < sh.n ? zeros[size_t(gr) * sh.n + row] : 0.0f;
            EXPECT_EQ(bf16_to_f32(uint16_t(rec[2 + h] & 0xFFFF)), 128.0f + z);
            EXPECT_EQ(rec[2 + h] >> 16, rec[2 + h] & 0xFFFF);
          }
    std::vector<float> x(size_t(sh.m) * (sh.k + 8));
    for (float& v : x) v = bf16_to_f32(f32_to_bf16(unit(rng)));
    for (bool accumulate : {false, true}) {
      std::vector<float> want(size_t(sh.m) * sh.n, 0.5f), got = want;
      quant_gemv_ref(true, x.data(), sh.k + 8, codes.data(), scales.data(), zeros.data(), int(scales.size()), sh.group,
                     want.data(), sh.m, sh.n, sh.k, accumulate);
      quant_gemv_int4_packed_ref(x.data(), sh.k + 8, p, sh.n, sh.k, sh.group, got.data(), sh.m, accumulate);
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
    }
  }
  const std::vector<uint8_t> codes(size_t(16) * 48, 0);
  const std::vector<float> ones(16, 1.0f);
  EXPECT_THROW(pack_int4_fragments_ref(codes.data(), ones.data(), ones.data(), 16, 96, 96), std::invalid_argument);
  EXPECT_THROW(pack_int4_fragments_ref(codes.data(), ones.data(), ones.data(), 16, 128, 64), std::invalid_argument);
}

}  // namespace int4_pack_ref_test
}  // namespace servelab::kernels
