// RoPE + KV write (fused and unfused), RMSNorm (plain and fused with the residual add),
// SiLU-and-multiply, embedding, block copies and swaps on the GPU against the references, in bf16
// and fp16 storage.
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "kernels/lora.h"
#include "kernels/ops.h"
#include "kernels/ref/lora_ref.h"
#include "kernels/ref/ops_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"
#include "tests/kernels_gpu/qkv_args_util.h"

namespace servelab::kernels {
namespace {

using testing::DeviceBuffer;

std::vector<float> slice_heads(const std::vector<float>& qkv, int n_tokens, int stride, int first, int count) {
  std::vector<float> out;
  for (int t = 0; t < n_tokens; ++t)
    out.insert(out.end(), qkv.begin() + size_t(t) * stride + first, qkv.begin() + size_t(t) * stride + first + count);
  return out;
}

/// Every test runs in bf16 and in fp16 storage (names end in /bf16 and /f16).
class OpsGpu : public ::testing::TestWithParam<ScalarType> {};

TEST_P(OpsGpu, RopeKvWriteFusedMatchesReferenceAndUnfused) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  // (8, 2) heads: one block per token; (32, 8) and (32, 32) at head_dim 128: a token's work dealt
  // over 4 and 8 blocks (few tokens).
  for (const auto& [n_heads, n_kv] : {std::pair{8, 2}, std::pair{32, 8}, std::pair{32, 32}})
  for (int hd : {32, 64, 128})
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE("heads " + std::to_string(n_heads) + "/" + std::to_string(n_kv) + " hd " + std::to_string(hd));
      const int n_tokens = 17, stride = (n_heads + 2 * n_kv) * hd;
      const KvShape shape{40, n_kv, hd};
      const std::vector<float> qkv = testing::random16(t, size_t(n_tokens) * stride, rng);
      const std::vector<float> bias = with_bias ? testing::random16(t, stride, rng) : std::vector<float>{};
      std::vector<int32_t> pos(n_tokens);
      std::vector<int64_t> slots(n_tokens);
      std::uniform_int_distribution<int> p(0, 8000);
      for (int tok = 0; tok < n_tokens; ++tok) pos[tok] = tok == 0 ? 0 : p(rng);
      std::iota(slots.begin(), slots.end(), 3);
      slots[5] = -1;  // a padding row: never written
      const std::vector<float> inv = rope_inv_freq(500000.0f, hd);

      // Reference: bias, rope on q and k, write k and v.
      std::vector<float> r = qkv;
      if (with_bias)
        for (int tok = 0; tok < n_tokens; ++tok)
          for (int i = 0; i < stride; ++i) r[size_t(tok) * stride + i] = testing::rounding(t)(r[size_t(tok) * stride + i] + bias[i]);
      std::vector<float> q = slice_heads(r, n_tokens, stride, 0, n_heads * hd);
      std::vector<float> k = slice_heads(r, n_tokens, stride, n_heads * hd, n_kv * hd);
      const std::vector<float> v = slice_heads(r, n_tokens, stride, (n_heads + n_kv) * hd, n_kv * hd);
      rope_ref(q.data(), n_tokens, n_heads, hd, pos.data(), inv.data());
      rope_ref(k.data(), n_tokens, n_kv, hd, pos.data(), inv.data());
      std::vector<float> kc_ref(shape.n_slots * shape.row_elems(), 0.0f), vc_ref = kc_ref;
      kv_write_ref(k.data(), v.data(), n_tokens, slots.data(), shape, kc_ref.data(), vc_ref.data());

      std::vector<std::vector<float>> results;  // fused, unfused: q, k cache, v cache
      for (bool fused : {true, false}) {
        DeviceBuffer d_qkv = testing::upload16(t, qkv), d_bias = testing::upload16(t, bias);
        DeviceBuffer d_pos = testing::upload(pos), d_slots = testing::upload(slots), d_inv = testing::upload(inv);
        DeviceBuffer kc(kc_ref.size() * 2), vc(kc_ref.size() * 2);
        CUDA_CHECK(cudaMemset(kc.get(), 0, kc.bytes()));
        CUDA_CHECK(cudaMemset(vc.get(), 0, vc.bytes()));
        const QkvArgs a = testing::qkv_args(t, d_qkv.get(), n_tokens, {n_heads, n_kv, hd}, with_bias ? d_bias.get() : nullptr,
                                            d_pos.get<int32_t>(), d_inv.get<float>(), d_slots.get<int64_t>(), kc.get(),
                                            vc.get());
        if (fused) {
          rope_kv_write(a, nullptr);
        } else {
          rope_inplace(a, nullptr);
          kv_write(a, nullptr);
        }
        const std::vector<float> out_qkv = testing::download16(t, d_qkv, qkv.size());
        results.push_back(slice_heads(out_qkv, n_tokens, stride, 0, n_heads * hd));
        results.push_back(testing::download16(t, kc, kc_ref.size()));
        results.push_back(testing::download16(t, vc, kc_ref.size()));
      }
      EXPECT_LT(testing::rel_error(results[0], q), testing::tolerance(t)) << hd;
      EXPECT_LT(testing::rel_error(results[1], kc_ref), testing::tolerance(t)) << hd;
      EXPECT_EQ(results[2], vc_ref) << hd;  // V is only (bias and) a copy
      for (int i = 0; i < 3; ++i) EXPECT_EQ(results[i], results[3 + i]) << "fused vs unfused, part " << i;
    }
}

TEST_P(OpsGpu, RmsNormAndFusedAddMatchReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int d : {896, 4096, 8200}) {
    const int rows = 17;
    const std::vector<float> x = testing::random16(t, size_t(rows) * d, rng), w = testing::random16(t, d, rng);
    const std::vector<float> res = testing::random16(t, size_t(rows) * d, rng);
    std::vector<float> y_ref(x.size()), res_ref = res, y2_ref(x.size());
    rms_norm_ref(x.data(), w.data(), rows, d, 1e-5f, y_ref.data());
    add_rms_norm_ref(x.data(), res_ref.data(), w.data(), rows, d, 1e-5f, y2_ref.data(), testing::rounding(t));

    DeviceBuffer dx = testing::upload16(t, x), dw = testing::upload16(t, w), out(x.size() * 2);
    out.poison();
    rms_norm(t, dx.get(), dw.get(), out.get(), rows, d, 1e-5f, nullptr);
    EXPECT_LT(testing::rel_error(testing::download16(t, out, x.size()), y_ref), testing::tolerance(t)) << d;

    DeviceBuffer dr = testing::upload16(t, res), fused_out(x.size() * 2);
    fused_out.poison();
    add_rms_norm(t, dx.get(), dr.get(), dw.get(), fused_out.get(), rows, d, 1e-5f, nullptr);
    const std::vector<float> fused_res = testing::download16(t, dr, x.size());
    const std::vector<float> fused_y = testing::download16(t, fused_out, x.size());
    EXPECT_EQ(fused_res, res_ref) << d;  // round(res + x), exactly
    EXPECT_LT(testing::rel_error(fused_y, y2_ref), testing::tolerance(t)) << d;

    DeviceBuffer dr2 = testing::upload16(t, res), unfused_out(x.size() * 2);
    residual_add(t, dx.get(), dr2.get(), int64_t(x.size()), nullptr);
    rms_norm(t, dr2.get(), dw.get(), unfused_out.get(), rows, d, 1e-5f, nullptr);
    EXPECT_EQ(testing::download16(t, dr2, x.size()), fused_res);
    EXPECT_EQ(testing::download16(t, unfused_out, x.size()), fused_y) << "fused and unfused differ";
  }
}

TEST_P(OpsGpu, SiluMulAndEmbeddingMatchReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const int rows = 17, ffn = 4864;
  const std::vector<float> gu = testing::random16(t, size_t(rows) * 2 * ffn, rng, 3.0f);
  std::vector<float> ref(size_t(rows) * ffn);
  silu_mul_ref(gu.data(), rows, ffn, ref.data());
  DeviceBuffer dgu = testing::upload16(t, gu), out(ref.size() * 2);
  out.poison();
  silu_mul(t, dgu.get(), out.get(), rows, ffn, nullptr);
  EXPECT_LT(testing::rel_error(testing::download16(t, out, ref.size()), ref), testing::tolerance(t));
  DeviceBuffer out2(ref.size() * 2);
  out2.poison();
  silu_then_mul(t, dgu.get(), out2.get(), rows, ffn, nullptr);
  EXPECT_LT(testing::rel_error(testing::download16(t, out2, ref.size()), ref), testing::tolerance(t)) << "unfused";

  const int vocab = 1000, d = 896;
  const std::vector<float> table = testing::random16(t, size_t(vocab) * d, rng);
  std::vector<int32_t> ids(rows);
  std::uniform_int_distribution<int> id(0, vocab - 1);
  for (int32_t& i : ids) i = id(rng);
  std::vector<float> eref(size_t(rows) * d);
  embedding_ref(table.data(), ids.data(), rows, d, eref.data());
  DeviceBuffer dt = testing::upload16(t, table), di = testing::upload(ids), eout(eref.size() * 2);
  eout.poison();
  embedding(t, dt.get(), di.get<int32_t>(), eout.get(), rows, d, nullptr);
  EXPECT_EQ(testing::download16(t, eout, eref.size()), eref);
}

TEST_P(OpsGpu, CopyBlocksAndSwapRoundTrip) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const KvShape shape{16 * 10, 2, 64};
  const int bs = 16, n_arenas = 3;
  const int64_t block_elems = shape.row_elems() * bs;
  std::vector<std::vector<float>> host(n_arenas);
  std::vector<DeviceBuffer> dev;
  std::vector<void*> ptrs;
  for (auto& h : host) {
    h = testing::random16(t, size_t(shape.n_slots) * shape.row_elems(), rng);
    dev.push_back(testing::upload16(t, h));
    ptrs.push_back(dev.back().get());
  }
  DeviceBuffer d_ptrs = testing::upload(ptrs);
  // Copy-on-write pairs (src, dst): distinct destinations that are nobody's source.
  const std::vector<std::pair<int32_t, int32_t>> pairs = {{0, 7}, {3, 8}, {0, 9}};
  std::vector<int32_t> flat;
  for (auto [s, d] : pairs) flat.insert(flat.end(), {s, d});
  DeviceBuffer d_pairs = testing::upload(flat);
  copy_blocks(d_ptrs.get<void*>(), n_arenas, d_pairs.get<int32_t>(), 3, block_elems * 2, nullptr);
  for (int a = 0; a < n_arenas; ++a) {
    block_copy_ref(host[a].data(), shape, bs, pairs);
    EXPECT_EQ(testing::download16(t, dev[a], host[a].size()), host[a]) << a;
  }
  // Swap out blocks 2 and 7 into mapped pinned host memory, clobber them, swap back in.
  const std::vector<int32_t> blocks = {2, 7};
  DeviceBuffer d_blocks = testing::upload(blocks);
  void* pinned = nullptr;
  CUDA_CHECK(cudaHostAlloc(&pinned, size_t(blocks.size()) * n_arenas * block_elems * 2, cudaHostAllocMapped));
  void* pinned_dev = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&pinned_dev, pinned, 0));
  gather_blocks(d_ptrs.get<void*>(), n_arenas, d_blocks.get<int32_t>(), 2, block_elems * 2, pinned_dev, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  for (int a = 0; a < n_arenas; ++a)
    for (int32_t b : blocks) CUDA_CHECK(cudaMemset(dev[a].get<char>() + b * block_elems * 2, 0xFF, block_elems * 2));
  scatter_blocks(d_ptrs.get<void*>(), n_arenas, d_blocks.get<int32_t>(), 2, block_elems * 2, pinned_dev, nullptr);
  for (int a = 0; a < n_arenas; ++a) EXPECT_EQ(testing::download16(t, dev[a], host[a].size()), host[a]) << a;
  CUDA_CHECK(cudaFreeHost(pinned));
}

TEST_P(OpsGpu, LoraShrinkExpandMatchReferenceForMixedAdapters) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  // 17 rows over 3 slots and no adapter (-1, padding rows too), rank 16 padded to 24 in slot 1's
  // pool by zeros, an output block at column 40 of a wider y; then replayed from a CUDA graph.
  const int rows = 17, n_in = 896, n_out = 600, max_rank = 24, n_slots = 3, c0 = 40, ld_y = 704;
  std::vector<int32_t> slot(rows);
  for (int r = 0; r < rows; ++r) slot[size_t(r)] = int32_t(r % 4) - 1;
  const std::vector<float> x = testing::random16(t, size_t(rows) * n_in, rng);
  std::vector<float> a = testing::random16(t, size_t(n_slots) * max_rank * n_in, rng, 0.05f);
  const std::vector<float> b = testing::random16(t, size_t(n_slots) * n_out * max_rank, rng, 0.2f);
  for (int k = 16; k < max_rank; ++k)
    std::fill_n(a.begin() + (int64_t(1) * max_rank + k) * n_in, n_in, 0.0f);
  const std::vector<float> scale = {2.0f, 0.5f, 1.0f};
  const std::vector<float> y0 = testing::random16(t, size_t(rows) * ld_y, rng);
  std::vector<float> xa_ref(size_t(rows) * max_rank), y_ref = y0;
  lora_shrink_ref(x.data(), slot.data(), rows, a.data(), scale.data(), n_in, max_rank, xa_ref.data());
  lora_expand_ref(xa_ref.data(), slot.data(), rows, b.data(), n_out, max_rank, y_ref.data(), ld_y, c0);

  DeviceBuffer dx = testing::upload16(t, x), da = testing::upload16(t, a), db = testing::upload16(t, b);
  DeviceBuffer ds = testing::upload(scale), dslot = testing::upload(slot), dxa(xa_ref.size() * 4);
  LoraPool pool;
  pool.a = da.get();
  pool.b = db.get();
  pool.scale = ds.get<float>();
  pool.n_slots = n_slots;
  pool.n_in = n_in;
  pool.n_out = n_out;
  pool.max_rank = max_rank;
  for (int replay = 0; replay < 2; ++replay) {
    DeviceBuffer dy = testing::upload16(t, y0);
    dxa.poison();
    auto enqueue = [&](cudaStream_t s) {
      lora_shrink(t, dx.get(), dslot.get<int32_t>(), rows, pool, dxa.get<float>(), s);
      lora_expand(t, dxa.get<float>(), dslot.get<int32_t>(), rows, pool, dy.get(), ld_y, c0, s);
    };
    if (replay == 0) {
      enqueue(nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
    } else {
      testing::CapturedGraph g(enqueue);
      g.replay();
    }
    const std::vector<float> xa = testing::download<float>(dxa, xa_ref.size());
    EXPECT_LT(testing::rel_error(xa, xa_ref), 1e-3) << "shrink, replay " << replay;
    const std::vector<float> y = testing::download16(t, dy, y_ref.size());
    EXPECT_LT(testing::rel_error(y, y_ref), testing::tolerance(t)) << "expand, replay " << replay;
    for (int r = 0; r < rows; ++r) {  // rows without an adapter are untouched, bit for bit
      if (slot[size_t(r)] >= 0) continue;
      for (int c = 0; c < ld_y; ++c) ASSERT_EQ(y[size_t(r) * ld_y + c], y0[size_t(r) * ld_y + c]);
    }
  }
  EXPECT_THROW(lora_shrink(t, dx.get(), dslot.get<int32_t>(), rows, LoraPool{}, dxa.get<float>(), nullptr),
               std::invalid_argument);
}

TEST_P(OpsGpu, LoraFusedSegmentsMatchReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  // A fused q|k|v product: 3 segments of rank 12 (the expand's scalar path; the test above takes
  // the 16-byte one), eagerly and from a CUDA graph. 300 rows: blocks take tiles of rows (the
  // last one partial), rows in runs of 7 of one slot or none, as a prefill's sequences give them.
  const int rows = 300, n_in = 264, max_rank = 12, n_slots = 2, n_seg = 3, ld_y = 330;
  const int seg_end[n_seg] = {128, 192, 256}, n_out = 256;
  std::vector<int32_t> slot(rows);
  for (int r = 0; r < rows; ++r) slot[size_t(r)] = int32_t((r / 7) % 3) - 1;
  const std::vector<float> x = testing::random16(t, size_t(rows) * n_in, rng);
  const std::vector<float> a = testing::random16(t, size_t(n_slots) * n_seg * max_rank * n_in, rng, 0.05f);
  const std::vector<float> b = testing::random16(t, size_t(n_slots) * n_out * max_rank, rng, 0.2f);
  const std::vector<float> scale = {1.5f, 0.25f};
  const std::vector<float> y0 = testing::random16(t, size_t(rows) * ld_y, rng);
  std::vector<float> xa_ref(size_t(rows) * n_seg * max_rank), y_ref = y0;
  lora_shrink_ref(x.data(), slot.data(), rows, a.data(), scale.data(), n_in, n_seg * max_rank, xa_ref.data());
  lora_expand_segments_ref(xa_ref.data(), slot.data(), rows, b.data(), n_out, max_rank, n_seg, seg_end,
                           y_ref.data(), ld_y, 0);
  DeviceBuffer dx = testing::upload16(t, x), da = testing::upload16(t, a), db = testing::upload16(t, b);
  DeviceBuffer ds = testing::upload(scale), dslot = testing::upload(slot), dxa(xa_ref.size() * 4);
  LoraPool pool;
  pool.a = da.get();
  pool.b = db.get();
  pool.scale = ds.get<float>();
  pool.n_slots = n_slots;
  pool.n_in = n_in;
  pool.n_out = n_out;
  pool.max_rank = max_rank;
  pool.n_seg = n_seg;
  for (int m = 0; m < n_seg; ++m) pool.seg_end[m] = seg_end[m];
  for (int replay = 0; replay < 2; ++replay) {
    DeviceBuffer dy = testing::upload16(t, y0);
    dxa.poison();
    auto enqueue = [&](cudaStream_t s) {
      lora_shrink(t, dx.get(), dslot.get<int32_t>(), rows, pool, dxa.get<float>(), s);
      lora_expand(t, dxa.get<float>(), dslot.get<int32_t>(), rows, pool, dy.get(), ld_y, 0, s);
    };
    if (replay == 0) {
      enqueue(nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
    } else {
      testing::CapturedGraph g(enqueue);
      g.replay();
    }
    const std::vector<float> xa = testing::download<float>(dxa, xa_ref.size());
    EXPECT_LT(testing::rel_error(xa, xa_ref), 1e-3) << "shrink, replay " << replay;
    const std::vector<float> y = testing::download16(t, dy, y_ref.size());
    EXPECT_LT(testing::rel_error(y, y_ref), testing::tolerance(t)) << "expand, replay " << replay;
  }
  LoraPool bad = pool;
  bad.seg_end[1] = 100;  // below seg_end[0]
  EXPECT_THROW(lora_expand(t, dxa.get<float>(), dslot.get<int32_t>(), rows, bad, nullptr, ld_y, 0, nullptr),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsGpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace
}  // namespace servelab::kernels
