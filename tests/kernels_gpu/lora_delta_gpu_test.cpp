// The LoRA deltas expanded by the kernels that consume them (LoraSgmvConfig::gate_up_in_consumer,
// qkv_in_consumer, kernels/lora_delta.h): lora_sgmv_shrink finishing each adapter row's xa
// (xa_rows) against lora_shrink_ref, rows without an adapter left as they were, the tile counters
// back at 0 after each launch (a second launch and graph replays give the same xa); then
// lora_silu_mul_xa (gate|up, 2 segments) against lora_expand_segments_ref + lora_silu_mul_ref, and
// rope_kv_write with QkvArgs::lora (q|k|v, 3 segments) against the plain kernel on q|k|v + the
// reference delta (tokens dealt over several blocks, and a block's items in two passes of its
// staging). Ranks 8, 16 and 64 (1, 2 and 8 lanes a column), 12 (scalar loads) and 24 (a column a
// thread); 2 to 64 slots; rows without an adapter among them (their results bit for bit the plain
// kernels'); inputs not a multiple of the shrink's chunk; shrink grids of a block per item and of 1
// block an SM looping over the items (several items of one tile in one block).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/lora_act.h"
#include "kernels/lora_sgmv.h"
#include "kernels/ops.h"
#include "kernels/ref/lora_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"
#include "tests/kernels_gpu/lora_pool_util.h"

namespace servelab::kernels {
namespace {

using testing::DeviceBuffer;

class LoraDeltaGpu : public ::testing::TestWithParam<ScalarType> {};

struct DeltaCase {
  int rows, n_in, max_rank, n_slots, run;  // run: rows come in runs of this many of one slot
  LoraSgmvConfig config;
};

/// Slots: every fourth run without an adapter, else (run index · 5 + 1 + shift) mod n_slots.
std::vector<int32_t> slots_of(int rows, int run, int n_slots, int shift) {
  std::vector<int32_t> s(size_t(rows), -1);
  for (int r = 0; r < rows; ++r) {
    const int q = r / run;
    s[size_t(r)] = q % 4 == 3 ? -1 : int32_t((q * 5 + 1 + shift) % n_slots);
  }
  return s;
}

/// An adapter pool of seg_out.size() segments with random A, B and per-slot scales, and the
/// shrink's plan and scratch for cs.rows rows; shrink(slots) runs plan + shrink into xa_rows.
struct Fixture {
  ScalarType t;
  DeltaCase cs;
  int n_seg, total, n_out;
  int seg_end[kLoraMaxSegments] = {};
  std::vector<float> x, a, b, scale;
  DeviceBuffer dx, da, db, dscale, n_tiles, tiles, perm, perm_slot, tile_done, part, xa_rows, dslot;
  LoraPool pool;
  Fixture(ScalarType type, const DeltaCase& c, const std::vector<int>& seg_out, uint64_t seed)
      : t(type), cs(c), n_seg(int(seg_out.size())), total(n_seg * c.max_rank), n_out(0) {
    std::mt19937_64 rng(seed);
    for (int m = 0; m < n_seg; ++m) seg_end[m] = n_out += seg_out[size_t(m)];
    x = testing::random16(t, size_t(cs.rows) * cs.n_in, rng);
    a = testing::random16(t, size_t(cs.n_slots) * total * cs.n_in, rng, 0.05f);
    b = testing::random16(t, size_t(cs.n_slots) * n_out * cs.max_rank, rng, 0.2f);
    for (int s = 0; s < cs.n_slots; ++s) scale.push_back(0.25f + 0.5f * float(s % 4));
    dx = testing::upload16(t, x);
    da = testing::upload16(t, a);
    db = testing::upload16(t, b);
    dscale = testing::upload(scale);
    const int max_tiles = lora_max_tiles(cs.rows, cs.n_slots);
    n_tiles = DeviceBuffer(8);
    tiles = DeviceBuffer(size_t(max_tiles) * 12);
    perm = DeviceBuffer(size_t(cs.rows) * 4);
    perm_slot = DeviceBuffer(size_t(cs.rows) * 4);
    tile_done = DeviceBuffer(size_t(max_tiles) * 4);
    CUDA_CHECK(cudaMemset(tile_done.get(), 0, tile_done.bytes()));
    pool = testing::lora_test_pool(da.get(), db.get(), dscale.get<float>(), cs.n_slots, cs.n_in, cs.max_rank, seg_out);
    part = DeviceBuffer(lora_partial_floats(pool, cs.rows, cs.config.shrink_target_blocks) * 4 + 16);
    xa_rows = DeviceBuffer(size_t(cs.rows) * total * 4);
    dslot = DeviceBuffer(size_t(cs.rows) * 4);
  }
  LoraPlan plan() const {
    return LoraPlan{n_tiles.get<int32_t>(), tiles.get<int32_t>(), perm.get<int32_t>(), perm_slot.get<int32_t>(),
                    cs.config, tile_done.get<int32_t>()};
  }
  void set_slots(const std::vector<int32_t>& slot) {
    CUDA_CHECK(cudaMemcpy(dslot.get(), slot.data(), slot.size() * 4, cudaMemcpyHostToDevice));
    xa_rows.poison();
    part.poison();
  }
  void enqueue_shrink(cudaStream_t s) const {
    lora_plan(dslot.get<int32_t>(), cs.rows, cs.n_slots, plan(), s);
    lora_sgmv_shrink(t, dx.get(), plan(), cs.rows, pool, part.get<float>(), s, xa_rows.get<float>());
  }
  LoraXaDelta delta() const { return lora_xa_delta(pool, xa_rows.get<float>(), dslot.get<int32_t>()); }
  /// The shrink's xa rows against lora_shrink_ref (adapter rows), NaN (the poison) elsewhere, and
  /// the tile counters back at 0; returns the reference xa.
  std::vector<float> check_xa(const std::vector<int32_t>& slot) const {
    std::vector<float> ref(size_t(cs.rows) * total);
    lora_shrink_ref(x.data(), slot.data(), cs.rows, a.data(), scale.data(), cs.n_in, total, ref.data());
    const std::vector<float> got = testing::download<float>(xa_rows, ref.size());
    std::vector<float> g, w;
    for (int r = 0; r < cs.rows; ++r)
      for (int k = 0; k < total; ++k) {
        const size_t i = size_t(r) * total + k;
        if (slot[size_t(r)] < 0) {
          EXPECT_TRUE(std::isnan(got[i])) << "row " << r << " has no adapter: its xa row is not written";
          continue;
        }
        g.push_back(got[i]);
        w.push_back(ref[i]);
      }
    EXPECT_LT(testing::rel_error(g, w), 1e-4);
    const std::vector<int32_t> done = testing::download<int32_t>(tile_done, tile_done.bytes() / 4);
    EXPECT_TRUE(std::all_of(done.begin(), done.end(), [](int32_t v) { return v == 0; })) << "tile counters left";
    return ref;
  }
};

std::string name_of(const DeltaCase& c) {
  return "rows " + std::to_string(c.rows) + " n_in " + std::to_string(c.n_in) + " rank " +
         std::to_string(c.max_rank) + " slots " + std::to_string(c.n_slots) + " run " + std::to_string(c.run) +
         " blocks_per_sm " + std::to_string(c.config.grid_blocks_per_sm) + " target " +
         std::to_string(c.config.shrink_target_blocks);
}

LoraSgmvConfig grid(int blocks_per_sm, int target = kLoraDefaultTargetBlocks) {
  LoraSgmvConfig c;
  c.grid_blocks_per_sm = blocks_per_sm;
  c.shrink_target_blocks = target;
  return c;
}

/// gate|up: act = silu(g + dg) · (u + du) with the delta from the shrink's xa rows.
void gate_up_case(ScalarType t, const DeltaCase& cs, int ffn, uint64_t seed) {
  SCOPED_TRACE("gate|up " + name_of(cs) + " ffn " + std::to_string(ffn));
  Fixture f(t, cs, {ffn, ffn}, seed);
  std::mt19937_64 rng(seed + 1);
  const std::vector<float> gate_up = testing::random16(t, size_t(cs.rows) * 2 * ffn, rng);
  DeviceBuffer dg = testing::upload16(t, gate_up), act(size_t(cs.rows) * ffn * 2), plain(size_t(cs.rows) * ffn * 2);
  auto enqueue = [&](cudaStream_t s) {
    f.enqueue_shrink(s);
    lora_silu_mul_xa(t, dg.get(), f.delta(), act.get(), cs.rows, ffn, s);
  };
  silu_mul(t, dg.get(), plain.get(), cs.rows, ffn, nullptr);
  const std::vector<float> base = testing::download16(t, plain, size_t(cs.rows) * ffn);
  auto check = [&](const std::vector<int32_t>& slot, const char* how) {
    SCOPED_TRACE(how);
    const std::vector<float> xa = f.check_xa(slot);
    std::vector<float> delta(size_t(cs.rows) * 2 * ffn, 0.0f), ref(size_t(cs.rows) * ffn);
    lora_expand_segments_ref(xa.data(), slot.data(), cs.rows, f.b.data(), 2 * ffn, cs.max_rank, 2, f.seg_end,
                             delta.data(), 2 * ffn, 0);
    lora_silu_mul_ref(gate_up.data(), delta.data(), slot.data(), cs.rows, ffn, ref.data());
    const std::vector<float> got = testing::download16(t, act, ref.size());
    EXPECT_LT(testing::rel_error(got, ref), testing::tolerance(t));
    for (int r = 0; r < cs.rows; ++r) {
      if (slot[size_t(r)] >= 0) continue;
      for (int j = 0; j < ffn; ++j)
        ASSERT_EQ(got[size_t(r) * ffn + j], base[size_t(r) * ffn + j]) << "row " << r << ": silu_mul's bits";
    }
  };
  const std::vector<int32_t> first = slots_of(cs.rows, cs.run, cs.n_slots, 0);
  f.set_slots(first);
  act.poison();
  enqueue(nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  check(first, "eager");
  f.xa_rows.poison();  // a second launch: the counters were left at 0, the same xa again
  enqueue(nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  check(first, "eager, again");
  testing::CapturedGraph g(enqueue);
  for (int shift : {1, 2}) {
    const std::vector<int32_t> other = slots_of(cs.rows, cs.run, cs.n_slots, shift);
    f.set_slots(other);
    act.poison();
    g.replay();
    check(other, "graph, other slots");
  }
  EXPECT_THROW(lora_silu_mul_xa(t, dg.get(), f.delta(), act.get(), cs.rows, ffn + 8, nullptr), std::invalid_argument);
}

/// q|k|v: rope_kv_write with QkvArgs::lora against the plain kernel on q|k|v + the reference
/// delta (rounded once there); rows without an adapter (one of them a padding row) its bits.
void qkv_case(ScalarType t, const DeltaCase& cs, int n_heads, int n_kv, int hd, uint64_t seed) {
  SCOPED_TRACE("q|k|v " + name_of(cs) + " heads " + std::to_string(n_heads) + "/" + std::to_string(n_kv) + " hd " +
               std::to_string(hd));
  const int stride = (n_heads + 2 * n_kv) * hd, n_slots_kv = 2 * cs.rows + 2;
  Fixture f(t, cs, {n_heads * hd, n_kv * hd, n_kv * hd}, seed);
  std::mt19937_64 rng(seed + 1);
  const std::vector<float> qkv = testing::random16(t, size_t(cs.rows) * stride, rng);
  std::vector<int32_t> pos(size_t(cs.rows));
  std::vector<int64_t> kv_slot(size_t(cs.rows));
  for (int r = 0; r < cs.rows; ++r) {
    pos[size_t(r)] = 5 * r + 2;
    kv_slot[size_t(r)] = r == 3 ? -1 : 2 * r + 1;  // row 3: a padding row (no K/V write)
  }
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv_freq[size_t(i)] = std::pow(10000.0f, -2.0f * float(i) / float(hd));
  DeviceBuffer d_pos = testing::upload(pos), d_kv = testing::upload(kv_slot), d_freq = testing::upload(inv_freq);
  const size_t cache_elems = size_t(n_slots_kv) * n_kv * hd;
  struct Out {
    DeviceBuffer q, k, v;
  };
  auto make_out = [&](const std::vector<float>& in) {
    Out o{testing::upload16(t, in), DeviceBuffer(cache_elems * 2), DeviceBuffer(cache_elems * 2)};
    CUDA_CHECK(cudaMemset(o.k.get(), 0, o.k.bytes()));
    CUDA_CHECK(cudaMemset(o.v.get(), 0, o.v.bytes()));
    return o;
  };
  auto args = [&](Out& o) {
    QkvArgs a;
    a.dtype = t;
    a.qkv = o.q.get();
    a.qkv_row_stride = stride;
    a.n_tokens = cs.rows;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv;
    a.head_dim = hd;
    a.positions = d_pos.get<int32_t>();
    a.inv_freq = d_freq.get<float>();
    a.slot_mapping = d_kv.get<int64_t>();
    a.k_cache = o.k.get();
    a.v_cache = o.v.get();
    return a;
  };
  auto q_of = [&](const DeviceBuffer& buf) {  // the rotated Q stays in the rows
    const std::vector<float> all = testing::download16(t, buf, size_t(cs.rows) * stride);
    std::vector<float> q;
    for (int r = 0; r < cs.rows; ++r)
      q.insert(q.end(), all.begin() + int64_t(r) * stride, all.begin() + int64_t(r) * stride + n_heads * hd);
    return q;
  };
  const std::vector<int32_t> slot = slots_of(cs.rows, cs.run, cs.n_slots, 0);
  f.set_slots(slot);
  Out got = make_out(qkv);
  QkvArgs ga = args(got);
  ga.lora = f.delta();
  f.enqueue_shrink(nullptr);
  rope_kv_write(ga, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> xa = f.check_xa(slot);
  std::vector<float> summed = qkv;
  lora_expand_segments_ref(xa.data(), slot.data(), cs.rows, f.b.data(), stride, cs.max_rank, 3, f.seg_end,
                           summed.data(), stride, 0);
  Out want = make_out(testing::rounded(t, summed)), plain = make_out(qkv);
  rope_kv_write(args(want), nullptr);
  rope_kv_write(args(plain), nullptr);
  QkvArgs bad = ga;
  EXPECT_THROW(rope_inplace(bad, nullptr), std::invalid_argument);
  bad.lora.n_out = stride - 8;
  EXPECT_THROW(rope_kv_write(bad, nullptr), std::invalid_argument);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> gq = q_of(got.q), wq = q_of(want.q), pq = q_of(plain.q);
  auto cache = [&](const DeviceBuffer& b) { return testing::download16(t, b, cache_elems); };
  const std::vector<float> gk = cache(got.k), wk = cache(want.k), pk = cache(plain.k);
  const std::vector<float> gv = cache(got.v), wv = cache(want.v), pv = cache(plain.v);
  const std::vector<float>*sets[3][3] = {{&gq, &wq, &pq}, {&gk, &wk, &pk}, {&gv, &wv, &pv}};
  const char* what[3] = {"Q", "K cache", "V cache"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(what[i]);
    EXPECT_LT(testing::rel_error(*sets[i][0], *sets[i][1]), testing::tolerance(t));
    EXPECT_GT(testing::rel_error(*sets[i][0], *sets[i][2]), 0.02);  // the delta is there
  }
  const int qw = n_heads * hd, kw = n_kv * hd;
  for (int r = 0; r < cs.rows; ++r) {
    if (slot[size_t(r)] >= 0) continue;
    for (int c = 0; c < qw; ++c) ASSERT_EQ(gq[size_t(r) * qw + c], pq[size_t(r) * qw + c]) << "row " << r;
    if (kv_slot[size_t(r)] < 0) continue;
    const size_t at = size_t(kv_slot[size_t(r)]) * kw;
    for (int c = 0; c < kw; ++c) {
      ASSERT_EQ(gk[at + c], pk[at + c]) << "row " << r;
      ASSERT_EQ(gv[at + c], pv[at + c]) << "row " << r;
    }
  }
}

TEST_P(LoraDeltaGpu, GateUpDeltaFromTheShrinksXaRows) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  gate_up_case(t, {37, 520, 16, 5, 1, grid(0)}, 264, 1);      // decode mix, 520 = 2 chunks + 8
  gate_up_case(t, {9, 1032, 8, 2, 1, grid(0)}, 1032, 2);      // rank 8, two adapters
  gate_up_case(t, {70, 4104, 64, 24, 7, grid(1)}, 136, 3);   // rank 64, runs of 7: 528 items on 1 block an SM
  gate_up_case(t, {12, 264, 12, 3, 1, grid(0)}, 40, 4);       // rank 12: scalar B loads
  gate_up_case(t, {10, 264, 24, 3, 1, grid(0)}, 48, 6);       // rank 24: a column a thread (3 lanes' worth)
  gate_up_case(t, {64, 2048, 16, 64, 1, grid(0, 264)}, 1024, 5);  // 64 slots, rows one by one
}

TEST_P(LoraDeltaGpu, QkvDeltaInsideRopeKvWrite) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  qkv_case(t, {9, 1032, 16, 4, 1, grid(0)}, 4, 2, 64, 11);
  qkv_case(t, {33, 264, 8, 40, 2, grid(1)}, 4, 2, 64, 12);
  qkv_case(t, {6, 520, 64, 2, 1, grid(0, 264)}, 4, 2, 64, 13);
  // 70 tokens (one block a token) of 160 items: two passes of the block's staging, the second partial.
  qkv_case(t, {70, 264, 16, 6, 3, grid(0)}, 8, 4, 128, 14);
  qkv_case(t, {5, 264, 16, 3, 1, grid(0)}, 8, 4, 128, 15);  // few tokens: 2 blocks a token
}

TEST(LoraDeltaGpuRefusals, ShrinkNeedsCountersForXaRows) {
  SKIP_WITHOUT_GPU();
  LoraPool pool;
  pool.n_slots = 1;
  pool.n_in = 8;
  pool.n_out = 8;
  pool.max_rank = 8;
  float xa = 0;
  EXPECT_THROW(lora_sgmv_shrink(ScalarType::bf16, nullptr, LoraPlan{}, 1, pool, nullptr, nullptr, &xa),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoraDeltaGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace
}  // namespace servelab::kernels
