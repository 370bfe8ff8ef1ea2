// A product's grouped shrink and expand as one launch (LoraSgmvConfig::side_fused; kernels/
// lora_fused.cu): the delta added into y (accumulate) or written alone against the references
// (lora_shrink_ref, then lora_expand_segments_ref), rows without an adapter untouched, the xa
// rows against lora_shrink_ref, the row (or tile) counters back at 0 and the launch's count at its
// shrink blocks, zeroed again by the next lora_plan (eager twice, then graph replays with other
// slots). Awkward shapes: outputs not a multiple of 256 columns, inputs not a multiple of the
// shrink's chunk, 1 to 64 rows (a partial row block), items of a row or of a slot tile, one shrink
// block looping over every item and more shrink blocks than items, 3 segments (q|k|v), rank 12
// (scalar B loads) and 32 (B beyond the 16 ranks loaded before the wait).
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/lora_sgmv.h"
#include "kernels/ref/lora_ref.h"
#include "kernels/ref/ops_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"
#include "tests/kernels_gpu/lora_pool_util.h"

namespace servelab::kernels {
namespace {
namespace lora_fused_test {  // unity builds: names of its own

using testing::DeviceBuffer;
constexpr ScalarType kT = ScalarType::bf16;

struct Case {
  int m, k, rank, n_slots, shrink_blocks;
  std::vector<int> seg_out;
  bool accumulate, row_items;
};

std::string name_of(const Case& c) {
  std::string segs;
  for (int s : c.seg_out) segs += std::to_string(s) + " ";
  return "M=" + std::to_string(c.m) + " K=" + std::to_string(c.k) + " rank " + std::to_string(c.rank) + " slots " +
         std::to_string(c.n_slots) + " shrink blocks " + std::to_string(c.shrink_blocks) + " outputs " + segs +
         (c.accumulate ? "accumulate" : "delta alone") + (c.row_items ? ", row items" : ", tile items");
}

/// Row r's slot: none for every third row from the second, else (r · 3 + shift) mod n_slots.
std::vector<int32_t> slots_of(int m, int n_slots, int shift) {
  std::vector<int32_t> s(static_cast<size_t>(m));
  for (int r = 0; r < m; ++r) s[size_t(r)] = r % 3 == 1 ? -1 : int32_t((r * 3 + shift) % n_slots);
  return s;
}

void run_case(const Case& cs, uint64_t seed) {
  SCOPED_TRACE(name_of(cs));
  std::mt19937_64 rng(seed);
  const int m = cs.m, k = cs.k;
  const int n_seg = int(cs.seg_out.size()), total = n_seg * cs.rank;
  int n = 0;
  for (int s : cs.seg_out) n += s;
  const std::vector<float> x = testing::random16(kT, size_t(m) * k, rng),
                           y0 = testing::random16(kT, size_t(m) * n, rng),
                           a = testing::random16(kT, size_t(cs.n_slots) * total * k, rng, 0.05f),
                           b = testing::random16(kT, size_t(cs.n_slots) * n * cs.rank, rng, 0.2f);
  std::vector<float> scale;
  for (int s = 0; s < cs.n_slots; ++s) scale.push_back(0.5f + 0.25f * float(s % 3));
  DeviceBuffer dx = testing::upload16(kT, x), da = testing::upload16(kT, a), db = testing::upload16(kT, b),
               dscale = testing::upload(scale), y(size_t(m) * n * 2);
  const int max_tiles = lora_max_tiles(m, cs.n_slots);
  DeviceBuffer counts(16), tiles(size_t(max_tiles) * 12), perm(size_t(m) * 4), perm_slot(size_t(m) * 4),
      tile_done(size_t(max_tiles + m) * 4), dslot(size_t(m) * 4), xa_rows(size_t(m) * total * 4),
      part(lora_partial_floats_per_row(k, total) * m * 4);
  for (DeviceBuffer* z : {&counts, &tile_done}) CUDA_CHECK(cudaMemset(z->get(), 0, z->bytes()));
  const LoraPool pool = testing::lora_test_pool(da.get(), db.get(), dscale.get<float>(), cs.n_slots, k, cs.rank, cs.seg_out);
  LoraSgmvConfig config;
  config.side_fused = true;
  config.fused_shrink_blocks = cs.shrink_blocks;
  config.fused_row_items = cs.row_items;
  int32_t* c = counts.get<int32_t>();
  const LoraPlan plan{c, tiles.get<int32_t>(), perm.get<int32_t>(), perm_slot.get<int32_t>(), config,
                      tile_done.get<int32_t>(), c + 2, 2};
  auto enqueue = [&](cudaStream_t s) {
    lora_plan(dslot.get<int32_t>(), m, cs.n_slots, plan, s);
    lora_sgmv_fused(kT, dx.get(), plan, m, pool, part.get<float>(), xa_rows.get<float>(), 1, y.get(), n, 0,
                    cs.accumulate, s);
  };
  auto reset_y = [&] {
    if (cs.accumulate) {
      const DeviceBuffer fresh = testing::upload16(kT, y0);
      CUDA_CHECK(cudaMemcpy(y.get(), fresh.get(), y.bytes(), cudaMemcpyDeviceToDevice));
    } else {
      y.poison();
    }
  };
  auto check = [&](const std::vector<int32_t>& slot, const char* how) {
    SCOPED_TRACE(how);
    std::vector<float> xa(size_t(m) * total), delta(size_t(m) * n, 0.0f);
    lora_shrink_ref(x.data(), slot.data(), m, a.data(), scale.data(), k, total, xa.data());
    lora_expand_segments_ref(xa.data(), slot.data(), m, b.data(), n, cs.rank, n_seg, pool.seg_end, delta.data(), n, 0);
    const std::vector<float> got = testing::download16(kT, y, size_t(m) * n);
    std::vector<float> g, want;
    for (int r = 0; r < m; ++r)
      for (int j = 0; j < n; ++j) {
        const size_t i = size_t(r) * n + j;
        if (slot[size_t(r)] < 0) {
          if (cs.accumulate) {
            ASSERT_EQ(got[i], y0[i]) << "row " << r << " has no adapter: untouched";
          }
          continue;
        }
        g.push_back(got[i]);
        want.push_back(round_bf16((cs.accumulate ? y0[i] : 0.0f) + delta[i]));
      }
    EXPECT_LT(testing::rel_error(g, want), testing::kBf16Tolerance);
    const std::vector<float> got_xa = testing::download<float>(xa_rows, xa.size());
    std::vector<float> gx, wx;
    for (int r = 0; r < m; ++r)
      for (int q = 0; q < total && slot[size_t(r)] >= 0; ++q) {
        gx.push_back(got_xa[size_t(r) * total + q]);
        wx.push_back(xa[size_t(r) * total + q]);
      }
    EXPECT_LT(testing::rel_error(gx, wx), 1e-4);
    const std::vector<int32_t> done = testing::download<int32_t>(tile_done, size_t(max_tiles + m)),
                               sync = testing::download<int32_t>(counts, 4);
    EXPECT_TRUE(std::all_of(done.begin(), done.end(), [](int32_t v) { return v == 0; })) << "row or tile counters left";
    EXPECT_EQ(sync[2], 0) << "the step's other count, zeroed by lora_plan";
    EXPECT_EQ(sync[3], cs.shrink_blocks) << "the launch's count: every shrink block once";
  };
  const std::vector<int32_t> first = slots_of(m, cs.n_slots, 0);
  CUDA_CHECK(cudaMemcpy(dslot.get(), first.data(), size_t(m) * 4, cudaMemcpyHostToDevice));
  for (const char* how : {"eager", "eager, again"}) {
    reset_y();
    enqueue(nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    check(first, how);
  }
  testing::CapturedGraph graph(enqueue);
  for (int shift : {1, 2}) {
    const std::vector<int32_t> other = slots_of(m, cs.n_slots, shift);
    CUDA_CHECK(cudaMemcpy(dslot.get(), other.data(), size_t(m) * 4, cudaMemcpyHostToDevice));
    reset_y();
    graph.replay();
    check(other, "graph, other slots");
  }
}

TEST(LoraFusedGpu, ShrinkAndExpandInOneLaunch) {
  SKIP_WITHOUT_GPU();
  run_case({16, 1032, 16, 5, 32, {200}, true, true}, 1);               // 1032 = 4 chunks + 8, 200 columns
  run_case({64, 4096, 16, 8, 128, {512, 256, 256}, false, true}, 2);   // q|k|v's 3 segments, the delta alone
  run_case({33, 4104, 16, 3, 1, {300}, true, false}, 3);               // one shrink block, tile items, a partial row block
  run_case({20, 520, 12, 4, 256, {264, 264}, false, true}, 4);         // rank 12: scalar B; more blocks than items
  run_case({48, 2048, 32, 2, 64, {1000}, true, false}, 5);             // rank 32: B past the prefetched 16 ranks
  run_case({1, 4096, 16, 1, 128, {4096}, true, true}, 6);
}

TEST(LoraFusedGpu, RefusesBadShrinkBlocks) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer ab(64 * 64 * 2), scale(16), part(4096), xa(4096), ints(1024), x(64 * 2), y(64 * 2);
  const LoraPool pool = testing::lora_test_pool(ab.get(), ab.get(), scale.get<float>(), 1, 64, 8, {64});
  LoraSgmvConfig config;
  config.fused_shrink_blocks = 0;
  int32_t* i = ints.get<int32_t>();
  const LoraPlan plan{i, i + 4, i + 64, i + 128, config, i + 192, i + 2, 1};
  EXPECT_THROW(lora_sgmv_fused(kT, x.get(), plan, 1, pool, part.get<float>(), xa.get<float>(), 0, y.get(), 64, 0, true,
                               nullptr),
               std::invalid_argument);
  config.fused_shrink_blocks = 8;
  const LoraPlan one{i, i + 4, i + 64, i + 128, config, i + 192, i + 2, 1};
  EXPECT_THROW(lora_sgmv_fused(kT, x.get(), one, 1, pool, part.get<float>(), xa.get<float>(), 1, y.get(), 64, 0, true,
                               nullptr),
               std::invalid_argument);  // the plan has 1 count
}

}  // namespace lora_fused_test
}  // namespace
}  // namespace servelab::kernels
