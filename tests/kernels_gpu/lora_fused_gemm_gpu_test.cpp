// The product with its LoRA runs inside (kernels/lora_fused_gemm.h) against the C++ reference
// (lora_fused_gemm_ref): the product alone on awkward shapes (rows in partial tiles, an input not a
// multiple of 64, outputs not a multiple of the block's columns, a K pipeline that wraps its ring
// many times), then runs of three adapters with rows between them without one, fused q|k|v-like
// segments, ranks 16 and 32, blocks of 128, 192 and 256 columns (blocks crossing a segment's end
// at rank 16), K split across blocks. The delta (the LoRA launch minus the plain one)
// is checked on its own so a small delta on a large product cannot hide.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/lora_fused_gemm.h"
#include "kernels/ref/lora_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"
#include "tests/kernels_gpu/lora_pool_util.h"

namespace servelab::kernels {
namespace lora_fused_gemm_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;

class LoraFusedGemmGpu : public ::testing::TestWithParam<ScalarType> {};

struct FusedCase {
  int n_in, max_rank, n_slots;
  std::vector<int> seg_out;   // output columns per segment (ends multiples of 128)
  std::vector<int> run_rows;  // consecutive stretches of rows...
  std::vector<int> run_slot;  // ...and their slots (-1: none)
  int block_n;                // 0: the kernel's choice
  int splits = 1;             // K split across blocks (with block_n set)
};

bool device_takes(ScalarType t) {
  LoraPool none;
  return lora_fused_fits(t, none, 128, 64);
}

void run_case(ScalarType t, const FusedCase& cs, uint64_t seed, LoraFusedGemm& gemm) {
  SCOPED_TRACE("n_in " + std::to_string(cs.n_in) + " rank " + std::to_string(cs.max_rank) + " segments " +
               std::to_string(cs.seg_out.size()) + " block_n " + std::to_string(cs.block_n) + " splits " + std::to_string(cs.splits));
  std::vector<int32_t> slot;
  std::vector<LoraRun> runs;
  for (size_t i = 0; i < cs.run_rows.size(); ++i) {
    if (cs.run_slot[i] >= 0) runs.push_back({cs.run_slot[i], int(slot.size()), cs.run_rows[i]});
    slot.insert(slot.end(), size_t(cs.run_rows[i]), cs.run_slot[i]);
  }
  const int rows = int(slot.size());
  std::mt19937_64 rng(seed);
  const int n_seg = int(cs.seg_out.size()), total = n_seg * cs.max_rank;
  int seg_end[kLoraMaxSegments] = {}, n_out = 0;
  for (int m = 0; m < n_seg; ++m) seg_end[m] = n_out += cs.seg_out[size_t(m)];
  const std::vector<float> x = testing::random16(t, size_t(rows) * cs.n_in, rng);
  const std::vector<float> w = testing::random16(t, size_t(n_out) * cs.n_in, rng, 0.05f);
  const std::vector<float> a = testing::random16(t, size_t(cs.n_slots) * total * cs.n_in, rng, 0.05f);
  const std::vector<float> b = testing::random16(t, size_t(cs.n_slots) * n_out * cs.max_rank, rng, 0.2f);
  std::vector<float> scale(size_t(cs.n_slots));
  for (int s = 0; s < cs.n_slots; ++s) scale[size_t(s)] = 0.25f + 0.5f * float(s);

  DeviceBuffer dx = testing::upload16(t, x), dw = testing::upload16(t, w), da = testing::upload16(t, a),
               db = testing::upload16(t, b);
  DeviceBuffer dy(size_t(rows) * n_out * 2), dy_plain(size_t(rows) * n_out * 2);
  dy.poison();
  dy_plain.poison();
  const LoraPool pool = testing::lora_test_pool(da.get(), db.get(), nullptr, cs.n_slots, cs.n_in, cs.max_rank, cs.seg_out);
  ASSERT_TRUE(lora_fused_fits(t, pool, n_out, cs.n_in));
  LoraFusedTiles tiles, plain_tiles;
  ASSERT_TRUE(lora_fused_tiles(runs, rows, scale.data(), tiles));
  ASSERT_TRUE(lora_fused_tiles({}, rows, scale.data(), plain_tiles));
  // The plain launch in the LoRA launch's shape (pick's where the case sets none): the rows
  // without a run then sum in the same order, so their bits must match.
  const LoraFusedShape shape = cs.block_n ? LoraFusedShape{cs.block_n, cs.splits} : gemm.pick(pool, n_out, cs.n_in, tiles.n);
  gemm.run(t, dx.get(), dw.get(), dy.get(), rows, n_out, cs.n_in, pool, tiles, nullptr, shape);
  gemm.run(t, dx.get(), dw.get(), dy_plain.get(), rows, n_out, cs.n_in, LoraPool{}, plain_tiles, nullptr, shape);
  CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<float> y_ref(size_t(rows) * n_out), plain_ref(y_ref.size());
  const std::vector<int32_t> no_slot(slot.size(), -1);
  lora_fused_gemm_ref(x.data(), w.data(), rows, n_out, cs.n_in, slot.data(), a.data(), b.data(), scale.data(),
                      cs.max_rank, n_seg, seg_end, testing::rounding(t), y_ref.data());
  lora_fused_gemm_ref(x.data(), w.data(), rows, n_out, cs.n_in, no_slot.data(), a.data(), b.data(), scale.data(),
                      cs.max_rank, n_seg, seg_end, nullptr, plain_ref.data());
  const std::vector<float> y = testing::download16(t, dy, y_ref.size());
  const std::vector<float> y_plain = testing::download16(t, dy_plain, y_ref.size());
  EXPECT_LT(testing::rel_error(y_plain, plain_ref), testing::tolerance(t));
  EXPECT_LT(testing::rel_error(y, y_ref), testing::tolerance(t));
  std::vector<float> d_got(y.size()), d_ref(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    d_got[i] = y[i] - y_plain[i];
    d_ref[i] = y_ref[i] - plain_ref[i];
  }
  EXPECT_LT(testing::rel_error(d_got, d_ref), 4 * testing::tolerance(t));
  for (int r = 0; r < rows; ++r) {  // rows without a run: the plain product's bits
    if (slot[size_t(r)] >= 0) continue;
    for (int c = 0; c < n_out; ++c) ASSERT_EQ(y[size_t(r) * n_out + c], y_plain[size_t(r) * n_out + c]) << "row " << r;
  }
}

TEST_P(LoraFusedGemmGpu, ProductAloneMatchesReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  if (!device_takes(t)) GTEST_SKIP() << "the fused kernel needs sm_90a and a compute 9.0 device";
  LoraFusedGemm gemm;
  uint64_t seed = 501;
  // 1 row; 77 rows and an input of 520 (K tail); 300 rows in 3 tiles, out 384 (not a multiple of 256).
  for (int bn : {128, 192, 256}) {
    run_case(t, {64, 16, 1, {384}, {1}, {-1}, bn}, seed++, gemm);
    run_case(t, {520, 16, 1, {384}, {77}, {-1}, bn}, seed++, gemm);
    run_case(t, {1032, 16, 1, {384}, {300}, {-1}, bn}, seed++, gemm);
  }
  run_case(t, {4104, 16, 1, {1024}, {130}, {-1}, 0}, seed++, gemm);  // 65 k-steps: the ring wraps
  // K split across 2, 3 and 7 blocks (the last adds the partial sums), twice each: the counters
  // reset for the next launch.
  for (int sp : {2, 3, 7})
    for (int rep = 0; rep < 2; ++rep) run_case(t, {1032, 16, 1, {384}, {300}, {-1}, 128, sp}, seed++, gemm);
}

TEST_P(LoraFusedGemmGpu, RunsInsideMatchReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  if (!device_takes(t)) GTEST_SKIP() << "the fused kernel needs sm_90a and a compute 9.0 device";
  LoraFusedGemm gemm;
  const FusedCase cases[] = {
      // q|k|v-like (256 | 128 | 128), rank 16: runs of 37 (slot 1), 150 (slot 0, two tiles) and 13
      // (slot 2) rows with rows without an adapter between and after them.
      {520, 16, 3, {256, 128, 128}, {37, 5, 150, 13, 9}, {1, -1, 0, 2, -1}, 0},
      // gate|up-like (512 | 512), rank 32, both block widths; a wide input.
      {2056, 32, 2, {512, 512}, {3, 140, 60}, {-1, 1, 0}, 128},
      {2056, 32, 2, {512, 512}, {3, 140, 60}, {-1, 1, 0}, 256},
      // one segment, rank 16, 64 slots, a 1-row run.
      {1032, 16, 64, {640}, {1, 7, 50}, {63, -1, 17}, 0},
      // blocks crossing a segment's end (rank 16: the shrink takes both segments' ranks): 192
      // columns over 640 | 640, 256 over 384 | 384 | 384; and K split in 3 with the runs inside.
      {520, 16, 3, {640, 640}, {37, 5, 150}, {1, -1, 2}, 192},
      {520, 16, 3, {384, 384, 384}, {70, 60}, {2, 0}, 256},
      {1032, 16, 3, {384, 384, 384}, {70, 3, 60}, {2, -1, 0}, 256, 3},
      {2056, 32, 2, {512, 512}, {3, 140, 60}, {-1, 1, 0}, 128, 4},
  };
  uint64_t seed = 531;
  for (const FusedCase& cs : cases) run_case(t, cs, seed++, gemm);
}

TEST_P(LoraFusedGemmGpu, RefusesWhatItDoesNotTake) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  LoraPool pool;
  pool.n_slots = 2;
  pool.n_in = 512;
  pool.n_out = 384;
  pool.max_rank = 8;  // rank 8: not the kernel's
  pool.n_seg = 1;
  EXPECT_FALSE(lora_fused_fits(t, pool, 384, 512));
  pool.max_rank = 16;
  pool.n_seg = 2;
  pool.seg_end[0] = 120;  // a segment narrower than a block
  EXPECT_FALSE(lora_fused_fits(t, pool, 384, 512));
  pool.seg_end[0] = 196;  // an end not a multiple of 8
  EXPECT_FALSE(lora_fused_fits(t, pool, 384, 512));
  pool.max_rank = 32;
  pool.seg_end[0] = 200;  // rank 32: a block may not cross an end
  EXPECT_FALSE(lora_fused_fits(t, pool, 384, 512));
  pool.max_rank = 16;
  pool.seg_end[0] = 120;
  if (!device_takes(t)) return;
  LoraFusedGemm gemm;
  LoraFusedTiles tiles;
  lora_fused_tiles({}, 4, nullptr, tiles);
  EXPECT_THROW(gemm.run(t, nullptr, nullptr, nullptr, 4, 384, 512, pool, tiles, nullptr), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoraFusedGemmGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace lora_fused_gemm_gpu_test
}  // namespace servelab::kernels
