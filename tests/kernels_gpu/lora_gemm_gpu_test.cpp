// The tensor-core LoRA path (kernels/lora_gemm.h: a shrink and an expand GEMM per run of rows of
// one adapter, the runs picked by kernels/lora_runs.h) against the C++ references
// (lora_shrink_ref, lora_expand_segments_ref) on awkward shapes: runs that are not multiples of 8
// (1 to 70 rows), rows without an adapter between runs, several adapters in one step, ranks 8, 16
// and 64, 1 to 3 segments of equal widths (one strided-batched expand) and unequal ones (one
// expand each), inputs that are not multiples of 16, an output at a column offset inside a wider
// row. Rows outside the picked runs stay untouched bit for bit.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/lora_gemm.h"
#include "kernels/ref/lora_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"
#include "tests/kernels_gpu/lora_pool_util.h"

namespace servelab::kernels {
namespace lora_gemm_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;

class LoraGemmGpu : public ::testing::TestWithParam<ScalarType> {};

struct GemmCase {
  int n_in, max_rank, n_slots;
  std::vector<int> seg_out;      // output columns per segment
  std::vector<int> run_rows;     // consecutive runs of rows...
  std::vector<int> run_slot;     // ...and their slots (-1: no adapter)
  int min_rows, max_runs;        // lora_gemm_runs' choice
};

// accumulate = false: the expand writes the delta alone (beta 0) into the runs' rows' columns.
// y's rows are ld_pad columns wider than the output, which starts at column c0.
void run_case(ScalarType t, const GemmCase& cs, uint64_t seed, LoraGemm& gemm, bool accumulate = true, int ld_pad = 40,
              int c0 = 24) {
  SCOPED_TRACE("n_in " + std::to_string(cs.n_in) + " rank " + std::to_string(cs.max_rank) + " segments " +
               std::to_string(cs.seg_out.size()) + (accumulate ? "" : ", the delta alone"));
  std::vector<int32_t> slot;
  for (size_t i = 0; i < cs.run_rows.size(); ++i) slot.insert(slot.end(), size_t(cs.run_rows[i]), cs.run_slot[i]);
  const int rows = int(slot.size());
  const std::vector<LoraRun> runs = lora_gemm_runs(slot.data(), rows, cs.min_rows, cs.max_runs);
  ASSERT_FALSE(runs.empty());
  std::vector<int32_t> left, in_runs(slot.size(), -1);  // the rows the runs cover, with their slots
  lora_rows_left(slot.data(), rows, runs, left);
  for (int r = 0; r < rows; ++r)
    if (left[size_t(r)] < 0) in_runs[size_t(r)] = slot[size_t(r)];

  std::mt19937_64 rng(seed);
  const int n_seg = int(cs.seg_out.size()), total = n_seg * cs.max_rank;
  int seg_end[kLoraMaxSegments] = {}, n_out = 0;
  for (int m = 0; m < n_seg; ++m) seg_end[m] = n_out += cs.seg_out[size_t(m)];
  const int ld_y = n_out + ld_pad;
  const std::vector<float> x = testing::random16(t, size_t(rows) * cs.n_in, rng);
  const std::vector<float> a = testing::random16(t, size_t(cs.n_slots) * total * cs.n_in, rng, 0.05f);
  const std::vector<float> b = testing::random16(t, size_t(cs.n_slots) * n_out * cs.max_rank, rng, 0.2f);
  std::vector<float> scale(size_t(cs.n_slots));
  for (int s = 0; s < cs.n_slots; ++s) scale[size_t(s)] = 0.25f + 0.5f * float(s);
  const std::vector<float> y0 = testing::random16(t, size_t(rows) * ld_y, rng);

  DeviceBuffer dx = testing::upload16(t, x), da = testing::upload16(t, a), db = testing::upload16(t, b);
  DeviceBuffer dy = testing::upload16(t, y0), dxa(size_t(rows) * total * 2);
  dxa.poison();
  const LoraPool pool = testing::lora_test_pool(da.get(), db.get(), nullptr, cs.n_slots, cs.n_in, cs.max_rank, cs.seg_out);
  for (const LoraRun& r : runs) gemm.shrink(t, dx.get(), pool, r, scale[size_t(r.slot)], dxa.get(), nullptr);
  for (const LoraRun& r : runs) gemm.expand(t, dxa.get(), pool, r, dy.get(), ld_y, c0, nullptr, accumulate);
  CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<float> xa_ref(size_t(rows) * total), y_ref = y0, base = y0;  // base: what the delta adds to
  if (!accumulate)
    for (int r = 0; r < rows; ++r)
      if (in_runs[size_t(r)] >= 0)
        for (int c = c0; c < c0 + n_out; ++c) y_ref[size_t(r) * ld_y + c] = base[size_t(r) * ld_y + c] = 0;
  lora_shrink_ref(x.data(), in_runs.data(), rows, a.data(), scale.data(), cs.n_in, total, xa_ref.data());
  lora_expand_segments_ref(xa_ref.data(), in_runs.data(), rows, b.data(), n_out, cs.max_rank, n_seg, seg_end,
                           y_ref.data(), ld_y, c0);
  const std::vector<float> y = testing::download16(t, dy, y_ref.size());
  EXPECT_LT(testing::rel_error(y, y_ref), testing::tolerance(t));
  // The delta alone, so a small delta on a large y cannot hide: within 2 roundings of 16 bits.
  std::vector<float> dy_got(y.size()), dy_ref(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    dy_got[i] = y[i] - base[i];
    dy_ref[i] = y_ref[i] - base[i];
  }
  EXPECT_LT(testing::rel_error(dy_got, dy_ref), 4 * testing::tolerance(t));
  for (int r = 0; r < rows; ++r) {  // rows outside the runs untouched, bit for bit
    if (in_runs[size_t(r)] >= 0) continue;
    for (int c = 0; c < ld_y; ++c) ASSERT_EQ(y[size_t(r) * ld_y + c], y0[size_t(r) * ld_y + c]) << "row " << r;
  }
}

TEST_P(LoraGemmGpu, RunsMatchReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  LoraGemm gemm;
  const GemmCase cases[] = {
      // q|k|v-like of unequal segments, rank 8: runs of 37, 70, 13 and 20 rows over 3 adapters,
      // rows without one between them; the 1-row run is left (below min_rows).
      {264, 8, 3, {128, 64, 64}, {37, 5, 70, 1, 13, 3, 20}, {1, -1, 0, 2, 1, -1, 2}, 9, 8},
      // equal segments (one batched expand), rank 16, a wide input; two adapters back to back.
      {4104, 16, 4, {96, 96, 96}, {3, 45, 19, 2}, {-1, 3, 0, -1}, 1, 8},
      // gate|up-like, rank 64; only the 2 longest of 3 runs (the 11-row one is left).
      {520, 64, 2, {200, 200}, {11, 66, 4, 29}, {0, 1, -1, 0}, 1, 2},
      // one segment, rank 16, a single row as a run, 64 slots.
      {1032, 16, 64, {300}, {1, 7, 50}, {63, -1, 17}, 1, 8},
  };
  uint64_t seed = 131;
  for (const GemmCase& cs : cases) run_case(t, cs, seed++, gemm);
  EXPECT_GT(gemm.heuristic_queries(), 0);
}

// The delta alone (LoraHook::delta in eager steps): beta 0 into the runs' rows, the rest untouched.
TEST_P(LoraGemmGpu, ExpandWritesTheDeltaAloneWithoutAccumulate) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  LoraGemm gemm;
  run_case(t, {264, 8, 3, {128, 64, 64}, {37, 5, 70, 1, 13}, {1, -1, 0, 2, 1}, 9, 8}, 171, gemm, false);
  run_case(t, {4104, 16, 4, {96, 96, 96}, {3, 45, 19}, {-1, 3, 0}, 1, 8}, 172, gemm, false);
}

// A run's length is its prompt's: run lengths of one row bucket (kernels/gemm_rows.h: 97 to 128
// rows) take the algorithm cuBLASLt gave the bucket, asked once, and compute the product.
TEST_P(LoraGemmGpu, RunLengthsOfOneBucketAskCublasLtOnce) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  LoraGemm gemm;
  run_case(t, {1032, 16, 2, {256, 256}, {100}, {1}, 1, 8}, 181, gemm);
  const int64_t asked = gemm.heuristic_queries();
  EXPECT_GT(asked, 0);
  uint64_t seed = 182;
  for (int len : {97, 113, 127, 128}) run_case(t, {1032, 16, 2, {256, 256}, {len}, {1}, 1, 8}, seed++, gemm);
  EXPECT_EQ(gemm.heuristic_queries(), asked) << "every run length of the bucket took its algorithm";
}

// LoraGemm::prepare asks cuBLASLt for every row bucket up front (1-64 one by one, then 96, 128,
// 160: 67 buckets, each a shrink and one strided-batched expand): a step's run of any length in
// them, from row 0 of aligned buffers into y of the pool's width (as the backend passes them),
// asks nothing more, and computes the product.
TEST_P(LoraGemmGpu, PreparedBucketsAskNothingInTheSteps) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  LoraGemm gemm;
  {
    DeviceBuffer da(size_t(2) * 32 * 1032 * 2), db(size_t(2) * 512 * 16 * 2);
    gemm.prepare(t, testing::lora_test_pool(da.get(), db.get(), nullptr, 2, 1032, 16, {256, 256}), 1, 160);
  }
  const int64_t asked = gemm.heuristic_queries();
  EXPECT_EQ(asked, 2 * 67);
  uint64_t seed = 191;
  for (int len : {1, 17, 64, 65, 100, 131, 160})
    run_case(t, {1032, 16, 2, {256, 256}, {len}, {1}, 1, 8}, seed++, gemm, true, 0, 0);
  EXPECT_EQ(gemm.heuristic_queries(), asked) << "every run length took its prepared bucket's algorithm";
}

TEST_P(LoraGemmGpu, RefusesBadPoolsAndRuns) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  LoraGemm gemm(0);
  LoraPool pool;
  pool.n_slots = 2;
  pool.n_in = 12;  // not a multiple of 8
  pool.n_out = 8;
  pool.max_rank = 8;
  EXPECT_THROW(gemm.shrink(t, nullptr, pool, LoraRun{0, 0, 4}, 1.0f, nullptr, nullptr), std::invalid_argument);
  pool.n_in = 16;
  EXPECT_THROW(gemm.expand(t, nullptr, pool, LoraRun{2, 0, 4}, nullptr, 8, 0, nullptr), std::invalid_argument);
  pool.max_rank = kLoraMaxRank + 1;
  EXPECT_THROW(gemm.expand(t, nullptr, pool, LoraRun{0, 0, 4}, nullptr, 8, 0, nullptr), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoraGemmGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace lora_gemm_gpu_test
}  // namespace servelab::kernels
