// The decode gemv with the LoRA shrink in its first blocks and the delta in its epilogue
// (LoraSgmvConfig::in_product; kernels/gemv_lora.cuh): run_gemv and run_gemv_silu_mul with a
// LoraInGemv against the references (gemm_ref / gate_up_silu_ref on w plus the rows' deltas from
// lora_shrink_ref and lora_expand_segments_ref), rows without an adapter bit for bit the plain
// gemv's; the xa rows against lora_shrink_ref; the tile counters back at 0 after every launch
// and the gemv's count at its shrink blocks, zeroed again by the next lora_plan (a second launch
// and graph replays with other slots give the same results). Awkward shapes: outputs not a multiple of a row block, inputs not a multiple
// of the shrink's chunk, 4 and 16 chunks, items of a row or of a slot tile, K split over blocks, rank 12 (scalar B loads), one shrink block looping
// over every item and more shrink blocks than items, 1 to 16 rows (one or two column tiles of x) over up to 8 slots.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/gemm.h"
#include "kernels/lora_sgmv.h"
#include "kernels/ref/lora_ref.h"
#include "kernels/ref/ops_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"
#include "tests/kernels_gpu/lora_pool_util.h"

namespace servelab::kernels {
namespace {
namespace gemv_lora_test {  // unity builds: names of its own

using testing::DeviceBuffer;
constexpr ScalarType kT = ScalarType::bf16;  // gemv's type (f16 only with SERVELAB_KERNELS_FP16)

struct Case {
  int m, n_out, k, rank, n_slots, shrink_blocks, splits;  // n_out: the product's (silu: 2 · ffn)
  bool silu;
};

std::string name_of(const Case& c) {
  return std::string(c.silu ? "gate|up+silu" : "plain") + " M=" + std::to_string(c.m) + " N=" +
         std::to_string(c.n_out) + " K=" + std::to_string(c.k) + " rank " + std::to_string(c.rank) + " slots " +
         std::to_string(c.n_slots) + " shrink blocks " + std::to_string(c.shrink_blocks) + " splits " +
         std::to_string(c.splits);
}

/// Row r's slot: none for every third row from the second, else (r · 3 + shift) mod n_slots.
std::vector<int32_t> slots_of(int m, int n_slots, int shift) {
  std::vector<int32_t> s(static_cast<size_t>(m));
  for (int r = 0; r < m; ++r) s[size_t(r)] = r % 3 == 1 ? -1 : int32_t((r * 3 + shift) % n_slots);
  return s;
}

void run_case(const Case& cs, uint64_t seed) {
  SCOPED_TRACE(name_of(cs) + (seed % 3 == 0 ? ", 4 chunks" : ", 16 chunks") +
               (seed % 2 == 1 ? ", row items" : ", tile items"));
  std::mt19937_64 rng(seed);
  const int m = cs.m, n = cs.n_out, k = cs.k, ffn = n / 2;
  const std::vector<int> seg_out = cs.silu ? std::vector<int>{ffn, ffn} : std::vector<int>{n};
  const int n_seg = int(seg_out.size()), total = n_seg * cs.rank;
  const std::vector<float> x = testing::random16(kT, size_t(m) * k, rng), w = testing::random16(kT, size_t(n) * k, rng),
                           a = testing::random16(kT, size_t(cs.n_slots) * total * k, rng, 0.05f),
                           b = testing::random16(kT, size_t(cs.n_slots) * n * cs.rank, rng, 0.2f);
  std::vector<float> scale;
  for (int s = 0; s < cs.n_slots; ++s) scale.push_back(0.5f + 0.25f * float(s % 3));
  DeviceBuffer dx = testing::upload16(kT, x), dw = testing::upload16(kT, w), da = testing::upload16(kT, a),
               db = testing::upload16(kT, b), dscale = testing::upload(scale);
  const int max_tiles = lora_max_tiles(m, cs.n_slots);
  DeviceBuffer counts(16), tiles(size_t(max_tiles) * 12), perm(size_t(m) * 4), perm_slot(size_t(m) * 4),
      tile_done(size_t(max_tiles + m) * 4), dslot(size_t(m) * 4), xa_rows(size_t(m) * total * 4),
      part(lora_partial_floats_per_row(k, total) * m * 4), partials(size_t(Gemm::kGemvPartialFloats) * 8),
      counters(Gemm::kGemvCounters * 8);
  for (DeviceBuffer* z : {&counts, &tile_done, &counters}) CUDA_CHECK(cudaMemset(z->get(), 0, z->bytes()));
  const LoraPool pool = testing::lora_test_pool(da.get(), db.get(), dscale.get<float>(), cs.n_slots, k, cs.rank, seg_out);
  LoraSgmvConfig config;
  config.in_product_shrink_blocks = cs.shrink_blocks;
  config.in_product_chunks = seed % 3 == 0 ? 4 : 16;  // cases 3 and 6: 4 chunks
  config.in_product_row_items = seed % 2 == 1;        // odd cases: items of a row, even: of a slot tile
  int32_t* c = counts.get<int32_t>();
  const LoraPlan plan{c, tiles.get<int32_t>(), perm.get<int32_t>(), perm_slot.get<int32_t>(), config,
                      tile_done.get<int32_t>(), c + 2, 2};
  const LoraInGemv lora{lora_xa_delta(pool, xa_rows.get<float>(), dslot.get<int32_t>()),
                        lora_gemv_shrink(plan, m, pool, part.get<float>(), xa_rows.get<float>(), 1)};
  gemv::Plan gp = gemv::make_plan(n, k, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
  if (cs.splits > 0) gp.splits = cs.splits;
  const int out_n = cs.silu ? ffn : n;
  DeviceBuffer y(size_t(m) * out_n * 2), plain(size_t(m) * out_n * 2);
  auto product = [&](void* out, const LoraInGemv* l, cudaStream_t s) {
    if (cs.silu)
      run_gemv_silu_mul(kT, dx.get(), dw.get(), out, m, ffn, k, gp, partials.get<float>(), counters.get<int32_t>(), s, l);
    else
      run_gemv(kT, dx.get(), dw.get(), out, m, n, k, false, false, gp, partials.get<float>(), counters.get<int32_t>(), s,
               {}, l);
  };
  auto enqueue = [&](cudaStream_t s) {
    lora_plan(dslot.get<int32_t>(), m, cs.n_slots, plan, s);
    product(y.get(), &lora, s);
  };
  product(plain.get(), nullptr, nullptr);
  const std::vector<float> base = testing::download16(kT, plain, size_t(m) * out_n);

  auto check = [&](const std::vector<int32_t>& slot, const char* how) {
    SCOPED_TRACE(how);
    std::vector<float> xa(size_t(m) * total), delta(size_t(m) * n, 0.0f), prod(size_t(m) * n), ref(size_t(m) * out_n);
    lora_shrink_ref(x.data(), slot.data(), m, a.data(), scale.data(), k, total, xa.data());
    lora_expand_segments_ref(xa.data(), slot.data(), m, b.data(), n, cs.rank, n_seg, pool.seg_end, delta.data(), n, 0);
    gemm_ref(x.data(), w.data(), m, n, k, prod.data());
    for (size_t i = 0; i < prod.size(); ++i) prod[i] = round_bf16(prod[i] + delta[i]);
    if (cs.silu) {
      for (int r = 0; r < m; ++r)
        for (int j = 0; j < ffn; ++j) {
          const float g = prod[size_t(r) * n + j], u = prod[size_t(r) * n + ffn + j];
          ref[size_t(r) * ffn + j] = g / (1.0f + std::exp(-g)) * u;
        }
    } else {
      ref = prod;
    }
    const std::vector<float> got = testing::download16(kT, y, ref.size());
    EXPECT_LT(testing::rel_error(got, ref), testing::kBf16Tolerance);
    for (int r = 0; r < m; ++r) {
      if (slot[size_t(r)] >= 0) continue;
      for (int j = 0; j < out_n; ++j)
        ASSERT_EQ(got[size_t(r) * out_n + j], base[size_t(r) * out_n + j]) << "row " << r << ": the plain gemv's bits";
    }
    const std::vector<float> got_xa = testing::download<float>(xa_rows, xa.size());
    std::vector<float> g, want;
    for (int r = 0; r < m; ++r)
      for (int q = 0; q < total && slot[size_t(r)] >= 0; ++q) {
        g.push_back(got_xa[size_t(r) * total + q]);
        want.push_back(xa[size_t(r) * total + q]);
      }
    EXPECT_LT(testing::rel_error(g, want), 1e-4);
    const std::vector<int32_t> done = testing::download<int32_t>(tile_done, size_t(max_tiles + m)),
                               sync = testing::download<int32_t>(counts, 4);
    EXPECT_TRUE(std::all_of(done.begin(), done.end(), [](int32_t v) { return v == 0; })) << "tile counters left";
    EXPECT_EQ(sync[2], 0) << "the step's other gemv count, zeroed by lora_plan";
    EXPECT_EQ(sync[3], cs.shrink_blocks) << "the gemv's count: every shrink block once";
  };
  const std::vector<int32_t> first = slots_of(m, cs.n_slots, 0);
  CUDA_CHECK(cudaMemcpy(dslot.get(), first.data(), size_t(m) * 4, cudaMemcpyHostToDevice));
  for (const char* how : {"eager", "eager, again"}) {
    y.poison();
    enqueue(nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    check(first, how);
  }
  testing::CapturedGraph graph(enqueue);
  for (int shift : {1, 2}) {
    const std::vector<int32_t> other = slots_of(m, cs.n_slots, shift);
    CUDA_CHECK(cudaMemcpy(dslot.get(), other.data(), size_t(m) * 4, cudaMemcpyHostToDevice));
    y.poison();
    graph.replay();
    check(other, "graph, other slots");
  }
}

TEST(GemvLoraGpu, ShrinkInTheFirstBlocksDeltaInTheEpilogue) {
  SKIP_WITHOUT_GPU();
  run_case({8, 200, 1032, 16, 5, 32, 0, false}, 1);    // a partial row block, 1032 = 4 chunks + 8
  run_case({3, 4096, 4104, 16, 2, 1, 0, false}, 2);    // one shrink block loops over every item
  run_case({8, 2048, 4096, 16, 8, 64, 3, false}, 3);   // 8 slots, K split in three
  run_case({5, 264, 520, 12, 3, 32, 1, false}, 4);     // rank 12: scalar B loads
  run_case({8, 2000, 1032, 16, 4, 32, 0, true}, 5);    // gate|up + SiLU·mul, 2 segments
  run_case({1, 2 * 1000, 4096, 16, 1, 16, 2, true}, 6);
  run_case({16, 2048, 4096, 16, 8, 128, 3, false}, 7);  // two column tiles of x, K split in three
  run_case({12, 2000, 1032, 16, 4, 64, 0, true}, 8);    // gate|up + SiLU·mul over two column tiles
}

TEST(GemvLoraGpu, RefusesAShrinkThatDoesNotMatchTheProduct) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer x(64 * 2), w(64 * 64 * 2), y(64 * 2), partials(size_t(Gemm::kGemvPartialFloats) * 8),
      counters(Gemm::kGemvCounters * 4), ab(64 * 64 * 2), scale(16), part(4096), xa(4096), ints(1024);
  const LoraPool pool = testing::lora_test_pool(ab.get(), ab.get(), scale.get<float>(), 1, 64, 8, {64});
  LoraSgmvConfig config;
  int32_t* i = ints.get<int32_t>();
  const LoraPlan plan{i, i + 4, i + 64, i + 128, config, i + 192, i + 2, 1};
  const gemv::Plan gp = gemv::make_plan(64, 64, 132, 2, Gemm::kGemvCounters, Gemm::kGemvPartialFloats);
  LoraInGemv lora{lora_xa_delta(pool, xa.get<float>(), i + 256),
                  lora_gemv_shrink(plan, 1, pool, part.get<float>(), xa.get<float>(), 0)};
  lora.shrink.n_in = 32;  // not the product's K
  EXPECT_THROW(run_gemv(kT, x.get(), w.get(), y.get(), 1, 64, 64, false, false, gp, partials.get<float>(),
                        counters.get<int32_t>(), nullptr, {}, &lora),
               std::invalid_argument);
  EXPECT_THROW(lora_gemv_shrink(LoraPlan{}, 1, pool, part.get<float>(), xa.get<float>(), 0), std::invalid_argument);
  EXPECT_THROW(lora_gemv_shrink(plan, 1, pool, part.get<float>(), xa.get<float>(), 1), std::invalid_argument);  // 1 count
  config.in_product_shrink_blocks = 0;
  const LoraPlan none{i, i + 4, i + 64, i + 128, config, i + 192, i + 2, 1};
  EXPECT_THROW(lora_gemv_shrink(none, 1, pool, part.get<float>(), xa.get<float>(), 0), std::invalid_argument);
}

}  // namespace gemv_lora_test
}  // namespace
}  // namespace servelab::kernels
