// The LoRA deltas added by the kernels after the products (LoraSgmvConfig::gate_up_beside,
// qkv_beside). lora_silu_mul (kernels/lora_act.h: gate|up's delta inside SiLU·mul) against
// lora_silu_mul_ref: rows with and without an adapter (slot -1: the delta row, poisoned, is never
// read; the result is kernels::silu_mul's, bit for bit), every row one adapter, none, an ffn
// that is not a multiple of the 256 threads, and 1 row. And rope_kv_write's delta (below).
#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/lora_act.h"
#include "kernels/lora_runs.h"
#include "kernels/ops.h"
#include "kernels/ref/lora_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace {

using testing::DeviceBuffer;

class LoraActGpu : public ::testing::TestWithParam<ScalarType> {};

void run_case(ScalarType t, int rows, int ffn, const std::vector<int32_t>& slot, uint64_t seed) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " ffn " + std::to_string(ffn));
  std::mt19937_64 rng(seed);
  const std::vector<float> gate_up = testing::random16(t, size_t(rows) * 2 * ffn, rng);
  std::vector<float> delta = testing::random16(t, size_t(rows) * 2 * ffn, rng, 0.5f);
  DeviceBuffer dg = testing::upload16(t, gate_up), dd = testing::upload16(t, delta), ds = testing::upload(slot);
  for (int r = 0; r < rows; ++r)  // rows without an adapter: their delta rows hold NaN (never read)
    if (slot[size_t(r)] < 0)
      CUDA_CHECK(cudaMemset(static_cast<char*>(dd.get()) + size_t(r) * 2 * ffn * 2, 0xFF, size_t(2 * ffn) * 2));
  DeviceBuffer act(size_t(rows) * ffn * 2), plain(size_t(rows) * ffn * 2);
  act.poison();
  lora_silu_mul(t, dg.get(), dd.get(), ds.get<int32_t>(), act.get(), rows, ffn, nullptr);
  silu_mul(t, dg.get(), plain.get(), rows, ffn, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> ref(size_t(rows) * ffn);
  lora_silu_mul_ref(gate_up.data(), delta.data(), slot.data(), rows, ffn, ref.data());
  const std::vector<float> got = testing::download16(t, act, ref.size());
  EXPECT_LT(testing::rel_error(got, ref), testing::tolerance(t));
  const std::vector<float> base = testing::download16(t, plain, ref.size());
  int adapter_rows_changed = 0;
  for (int r = 0; r < rows; ++r) {
    bool same = true;
    for (int j = 0; j < ffn; ++j) same = same && got[size_t(r) * ffn + j] == base[size_t(r) * ffn + j];
    if (slot[size_t(r)] < 0) EXPECT_TRUE(same) << "row " << r << " has no adapter: silu_mul's bits";
    else adapter_rows_changed += !same;
  }
  int adapter_rows = 0;
  for (int32_t s : slot) adapter_rows += s >= 0;
  EXPECT_EQ(adapter_rows_changed, adapter_rows);
}

TEST_P(LoraActGpu, AddsTheDeltaOfAdapterRowsOnly) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::vector<int32_t> mixed(37);
  for (int r = 0; r < 37; ++r) mixed[size_t(r)] = r % 4 == 3 ? -1 : r % 5;
  run_case(t, 37, 264, mixed, 7);
  run_case(t, 5, 1032, std::vector<int32_t>(5, 2), 8);    // every row one adapter
  run_case(t, 6, 520, std::vector<int32_t>(6, -1), 9);    // no adapter: silu_mul
  run_case(t, 1, 8, std::vector<int32_t>{0}, 10);         // one row, one vector
  EXPECT_THROW(lora_silu_mul(t, nullptr, nullptr, nullptr, nullptr, 1, 12, nullptr), std::invalid_argument);
}

// lora_silu_mul_runs (LoraSgmvConfig::gate_up_in_silu_rows): the runs' rows' delta from
// their xa and B inside SiLU·mul, against lora_expand_segments_ref then lora_silu_mul_ref; rows
// outside the runs (their xa rows poisoned) keep silu_mul's bits. Awkward shapes: 37 rows (a
// partial tile of 16), runs of two slots inside one tile (B re-read at the change), a gap, an ffn
// that is not a multiple of a block's 256 columns, every rank compiled (8-32); bad runs refused.
void run_runs_case(ScalarType t, int rows, int ffn, int rank, const std::vector<LoraRun>& runs, uint64_t seed) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " ffn " + std::to_string(ffn) + " rank " + std::to_string(rank));
  std::mt19937_64 rng(seed);
  const int n_slots = 4, total = 2 * rank, n_out = 2 * ffn;
  const std::vector<float> gate_up = testing::random16(t, size_t(rows) * n_out, rng);
  const std::vector<float> xa = testing::random16(t, size_t(rows) * total, rng, 0.5f);
  const std::vector<float> b = testing::random16(t, size_t(n_slots) * n_out * rank, rng, 0.5f);
  std::vector<int32_t> slot(size_t(rows), -1);
  for (const LoraRun& r : runs) std::fill(slot.begin() + r.first, slot.begin() + r.first + r.count, r.slot);
  DeviceBuffer dg = testing::upload16(t, gate_up), dx = testing::upload16(t, xa), db = testing::upload16(t, b);
  for (int r = 0; r < rows; ++r)  // rows outside the runs: xa never read
    if (slot[size_t(r)] < 0)
      CUDA_CHECK(cudaMemset(static_cast<char*>(dx.get()) + size_t(r) * total * 2, 0xFF, size_t(total) * 2));
  LoraRunsDelta d;
  d.xa = dx.get();
  d.b = db.get();
  d.max_rank = rank;
  d.n_runs = int(runs.size());
  for (int q = 0; q < d.n_runs; ++q) {
    d.first[q] = runs[size_t(q)].first;
    d.count[q] = runs[size_t(q)].count;
    d.slot[q] = runs[size_t(q)].slot;
  }
  DeviceBuffer act(size_t(rows) * ffn * 2), plain(size_t(rows) * ffn * 2);
  act.poison();
  lora_silu_mul_runs(t, dg.get(), d, act.get(), rows, ffn, nullptr);
  silu_mul(t, dg.get(), plain.get(), rows, ffn, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> delta(size_t(rows) * n_out, 0.0f), ref(size_t(rows) * ffn);
  const int seg_end[2] = {ffn, n_out};
  lora_expand_segments_ref(testing::rounded(t, xa).data(), slot.data(), rows, b.data(), n_out, rank, 2, seg_end,
                           delta.data(), n_out, 0);
  lora_silu_mul_ref(gate_up.data(), delta.data(), slot.data(), rows, ffn, ref.data());
  const std::vector<float> got = testing::download16(t, act, ref.size()), base = testing::download16(t, plain, ref.size());
  EXPECT_LT(testing::rel_error(got, ref), testing::tolerance(t));
  for (int r = 0; r < rows; ++r) {
    bool same = true;
    for (int j = 0; j < ffn; ++j) same = same && got[size_t(r) * ffn + j] == base[size_t(r) * ffn + j];
    if (slot[size_t(r)] < 0) EXPECT_TRUE(same) << "row " << r << " is in no run: silu_mul's bits";
    else EXPECT_FALSE(same) << "row " << r << ": its delta is missing";
  }
}

TEST_P(LoraActGpu, RunsDeltaInsideSiluMul) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  // Tile 0: rows 2-8 on slot 1 then 9-20 on slot 3 (across tiles 0-1); rows 21-25 none; 26-36 slot 0.
  const std::vector<LoraRun> runs = {{1, 2, 7}, {3, 9, 12}, {0, 26, 11}};
  for (int rank : {8, 16, 24, 32}) run_runs_case(t, 37, 264, rank, runs, 20 + rank);
  run_runs_case(t, 64, 1032, 16, {{2, 0, 64}}, 30);  // one run, whole tiles, four blocks a row
  run_runs_case(t, 1, 8, 8, {{0, 0, 1}}, 31);         // one row, four columns' threads
  LoraRunsDelta bad;
  bad.max_rank = 64;  // not compiled
  bad.n_runs = 1;
  EXPECT_FALSE(lora_silu_mul_runs_fits(1, 64));
  EXPECT_FALSE(lora_silu_mul_runs_fits(kLoraConsumerRuns + 1, 16));
  EXPECT_THROW(lora_silu_mul_runs(t, nullptr, bad, nullptr, 4, 16, nullptr), std::invalid_argument);
  bad.max_rank = 16;
  bad.xa = bad.b = reinterpret_cast<const void*>(16);
  bad.first[0] = 2;
  bad.count[0] = 3;  // rows 2-4 of a 4-row step
  EXPECT_THROW(lora_silu_mul_runs(t, nullptr, bad, nullptr, 4, 16, nullptr), std::invalid_argument);
}

// rope_kv_write with QkvArgs::delta (LoraSgmvConfig::qkv_beside): adapter rows give what the
// plain kernel gives on q|k|v + delta (rounded once more there: within the storage tolerance),
// rows without an adapter its bits (their delta rows are NaN, never read); other modes refuse it.
TEST_P(LoraActGpu, RopeKvWriteAddsTheDeltaOfAdapterRows) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  const int rows = 9, n_heads = 4, n_kv = 2, hd = 64, stride = (n_heads + 2 * n_kv) * hd, n_slots = 2 * rows + 2;
  std::mt19937_64 rng(12);
  const std::vector<float> qkv = testing::random16(t, size_t(rows) * stride, rng);
  const std::vector<float> delta = testing::random16(t, size_t(rows) * stride, rng, 0.5f);
  std::vector<int32_t> lora_rows(rows), pos(rows);
  std::vector<int64_t> slots(rows);
  std::vector<float> summed = qkv;  // what the expand after the product would have left in qkv
  for (int r = 0; r < rows; ++r) {
    lora_rows[size_t(r)] = r % 3 == 1 ? -1 : r % 4;
    pos[size_t(r)] = 7 * r + 3;
    slots[size_t(r)] = r == 4 ? -1 : 2 * r + 1;  // row 4: a padding row (no K/V write)
    if (lora_rows[size_t(r)] >= 0)
      for (int c = 0; c < stride; ++c) summed[size_t(r) * stride + c] += delta[size_t(r) * stride + c];
  }
  summed = testing::rounded(t, summed);
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv_freq[size_t(i)] = std::pow(10000.0f, -2.0f * float(i) / float(hd));
  DeviceBuffer d_delta = testing::upload16(t, delta), d_rows = testing::upload(lora_rows), d_pos = testing::upload(pos),
               d_slots = testing::upload(slots), d_freq = testing::upload(inv_freq);
  for (int r = 0; r < rows; ++r)
    if (lora_rows[size_t(r)] < 0)
      CUDA_CHECK(cudaMemset(static_cast<char*>(d_delta.get()) + size_t(r) * stride * 2, 0xFF, size_t(stride) * 2));
  struct Out {
    DeviceBuffer q, k, v;
  };
  auto run = [&](const std::vector<float>& in, bool with_delta) {
    const size_t cache_bytes = size_t(n_slots) * n_kv * hd * 2;
    Out o{testing::upload16(t, in), DeviceBuffer(cache_bytes), DeviceBuffer(cache_bytes)};
    CUDA_CHECK(cudaMemset(o.k.get(), 0, o.k.bytes()));
    CUDA_CHECK(cudaMemset(o.v.get(), 0, o.v.bytes()));
    QkvArgs a;
    a.dtype = t;
    a.qkv = o.q.get();
    a.qkv_row_stride = stride;
    a.n_tokens = rows;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv;
    a.head_dim = hd;
    a.positions = d_pos.get<int32_t>();
    a.inv_freq = d_freq.get<float>();
    a.slot_mapping = d_slots.get<int64_t>();
    a.k_cache = o.k.get();
    a.v_cache = o.v.get();
    if (with_delta) {
      a.delta = d_delta.get();
      a.delta_rows = d_rows.get<int32_t>();
    }
    rope_kv_write(a, nullptr);
    if (with_delta) {
      EXPECT_THROW(rope_inplace(a, nullptr), std::invalid_argument);
      EXPECT_THROW(kv_write(a, nullptr), std::invalid_argument);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    return o;
  };
  const Out got = run(qkv, true), want = run(summed, false), plain = run(qkv, false);
  const size_t n_cache = size_t(n_slots) * n_kv * hd;
  // The rotated Q stays in the rows (their K and V parts are the inputs, left as they were: only
  // the first n_heads · hd columns compared); K and V go to the caches.
  auto q_only = [&](const DeviceBuffer& b) {
    const std::vector<float> all = testing::download16(t, b, size_t(rows) * stride);
    std::vector<float> q;
    for (int r = 0; r < rows; ++r)
      q.insert(q.end(), all.begin() + int64_t(r) * stride, all.begin() + int64_t(r) * stride + n_heads * hd);
    return q;
  };
  const std::vector<float> gq = q_only(got.q), wq = q_only(want.q), pq = q_only(plain.q);
  const std::vector<float> gk = testing::download16(t, got.k, n_cache), wk = testing::download16(t, want.k, n_cache),
                           pk = testing::download16(t, plain.k, n_cache);
  const std::vector<float> gv = testing::download16(t, got.v, n_cache), wv = testing::download16(t, want.v, n_cache),
                           pv = testing::download16(t, plain.v, n_cache);
  for (auto [g, w, p, what] : {std::tuple{&gq, &wq, &pq, "Q"}, std::tuple{&gk, &wk, &pk, "K cache"},
                               std::tuple{&gv, &wv, &pv, "V cache"}}) {
    SCOPED_TRACE(what);
    EXPECT_LT(testing::rel_error(*g, *w), testing::tolerance(t));
    EXPECT_GT(testing::rel_error(*g, *p), 0.05);  // the delta is there
  }
  // Rows without an adapter: the plain kernel's bits (Q in the rows; K and V at slot 2r + 1, none
  // for the padding row).
  const int qw = n_heads * hd, kw = n_kv * hd;
  for (int r = 0; r < rows; ++r) {
    if (lora_rows[size_t(r)] >= 0) continue;
    for (int c = 0; c < qw; ++c) ASSERT_EQ(gq[size_t(r) * qw + c], pq[size_t(r) * qw + c]) << "row " << r;
    if (slots[size_t(r)] < 0) continue;
    const size_t at = size_t(slots[size_t(r)]) * kw;
    for (int c = 0; c < kw; ++c) {
      ASSERT_EQ(gk[at + c], pk[at + c]) << "row " << r;
      ASSERT_EQ(gv[at + c], pv[at + c]) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoraActGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace
}  // namespace servelab::kernels
