#include <cmath>
#include <numbers>

#include <gtest/gtest.h>

#include "engine/model/fp8.h"
#include "engine/model/quant.h"
#include "kernels/ref/lora_ref.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/quant_gemv_ref.h"
#include "tests/kernels/kv_fixture.h"

namespace servelab::kernels {
namespace {

TEST(RopeRef, MatchesHandComputedRotation) {
  // head_dim 4: pairs (0, 2) and (1, 3); theta 100 gives inverse frequencies 1 and 0.1.
  const std::vector<float> inv = rope_inv_freq(100.0f, 4);
  ASSERT_EQ(inv.size(), 2u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_FLOAT_EQ(inv[1], 0.1f);
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  const int32_t pos = 3;
  rope_ref(x.data(), 1, 1, 4, &pos, inv.data());
  EXPECT_NEAR(x[0], 1.0 * std::cos(3.0) - 3.0 * std::sin(3.0), 1e-6);
  EXPECT_NEAR(x[2], 3.0 * std::cos(3.0) + 1.0 * std::sin(3.0), 1e-6);
  EXPECT_NEAR(x[1], 2.0 * std::cos(0.3) - 4.0 * std::sin(0.3), 1e-6);
  EXPECT_NEAR(x[3], 4.0 * std::cos(0.3) + 2.0 * std::sin(0.3), 1e-6);
}

TEST(RopeRef, PositionZeroIsIdentity) {
  std::mt19937_64 rng(1);
  std::vector<float> x = testing::random_bf16(3 * 64, rng), y = x;
  const int32_t pos[3] = {0, 0, 0};
  const std::vector<float> inv = rope_inv_freq(10000.0f, 64);
  rope_ref(y.data(), 3, 1, 64, pos, inv.data());
  EXPECT_EQ(x, y);
}

TEST(RopeRef, Llama3ScalingMatchesTransformersRule) {
  Llama3RopeScaling s;  // factor 8, low 1, high 4, original 8192 (Llama 3.1/3.2)
  const std::vector<float> plain = rope_inv_freq(500000.0f, 128), scaled = rope_inv_freq(500000.0f, 128, &s);
  const double low_wavelen = 8192.0, high_wavelen = 2048.0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wl = 2.0 * std::numbers::pi / plain[i];
    if (wl < high_wavelen) EXPECT_FLOAT_EQ(scaled[i], plain[i]) << i;                  // high frequency kept
    else if (wl > low_wavelen) EXPECT_NEAR(scaled[i], plain[i] / 8.0, 1e-6 * plain[i]) << i;  // low: divided
    else EXPECT_TRUE(scaled[i] <= plain[i] && scaled[i] >= plain[i] / 8.0f) << i;     // blend
  }
  EXPECT_FLOAT_EQ(scaled[0], plain[0]);
  EXPECT_NEAR(scaled.back(), plain.back() / 8.0, 1e-6 * plain.back());
}

TEST(RmsNormRef, UnitRmsAndWeight) {
  const std::vector<float> x = {3.0f, -4.0f}, w = {1.0f, 2.0f};
  std::vector<float> y(2);
  rms_norm_ref(x.data(), w.data(), 1, 2, 0.0f, y.data());
  const double rms = std::sqrt((9.0 + 16.0) / 2.0);
  EXPECT_NEAR(y[0], 3.0 / rms, 1e-6);
  EXPECT_NEAR(y[1], -8.0 / rms, 1e-6);
}

TEST(RmsNormRef, FusedAddEqualsAddThenNorm) {
  std::mt19937_64 rng(2);
  const int rows = 5, d = 96;
  const std::vector<float> x = testing::random_bf16(rows * d, rng), w = testing::random_bf16(d, rng);
  std::vector<float> r1 = testing::random_bf16(rows * d, rng), r2 = r1, y1(rows * d), y2(rows * d);
  add_rms_norm_ref(x.data(), r1.data(), w.data(), rows, d, 1e-5f, y1.data(), round_bf16);
  for (int i = 0; i < rows * d; ++i) r2[i] = round_bf16(r2[i] + x[i]);
  rms_norm_ref(r2.data(), w.data(), rows, d, 1e-5f, y2.data());
  EXPECT_EQ(r1, r2);
  EXPECT_EQ(y1, y2);
}

TEST(SiluMulRef, HandComputed) {
  const std::vector<float> gu = {0.0f, 2.0f, 5.0f, 3.0f};  // gate (0, 2), up (5, 3)
  std::vector<float> out(2);
  silu_mul_ref(gu.data(), 1, 2, out.data());
  EXPECT_FLOAT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 2.0 / (1.0 + std::exp(-2.0)) * 3.0, 1e-6);
}

TEST(GateUpSiluRef, HandComputedAndEqualToProductThenSiluMul) {
  // x = (1, 2); w rows: gate (1, 0), (0, 1); up (2, 1), (-1, 1): gate = (1, 2), up = (4, 1).
  const std::vector<float> x = {1, 2}, w = {1, 0, 0, 1, 2, 1, -1, 1};
  std::vector<float> act(2);
  gate_up_silu_ref(x.data(), w.data(), 1, 2, 2, act.data());
  EXPECT_NEAR(act[0], 1.0 / (1.0 + std::exp(-1.0)) * 4.0, 1e-6);
  EXPECT_NEAR(act[1], 2.0 / (1.0 + std::exp(-2.0)) * 1.0, 1e-6);
  // Awkward sizes with bf16 rounding: the product rounded, then silu_mul_ref, rounded.
  std::mt19937_64 rng(3);
  const int m = 3, ffn = 13, k = 24;
  const std::vector<float> xs = testing::random_bf16(m * k, rng), ws = testing::random_bf16(2 * ffn * k, rng);
  std::vector<float> gu(m * 2 * ffn), want(m * ffn), got(m * ffn);
  gemm_ref(xs.data(), ws.data(), m, 2 * ffn, k, gu.data(), false, round_bf16);
  silu_mul_ref(gu.data(), m, ffn, want.data());
  for (float& v : want) v = round_bf16(v);
  gate_up_silu_ref(xs.data(), ws.data(), m, ffn, k, got.data(), round_bf16);
  for (int i = 0; i < m * ffn; ++i) EXPECT_NEAR(got[i], want[i], 1e-2 * std::abs(want[i]) + 1e-6) << i;
}

TEST(KvWriteRef, WritesRowsAtSlotsAndSkipsPadding) {
  const KvShape shape{4, 1, 2};
  const std::vector<float> k = {1, 2, 3, 4}, v = {5, 6, 7, 8};
  const int64_t slots[2] = {2, -1};
  std::vector<float> kc(8, 0.0f), vc(8, 0.0f);
  kv_write_ref(k.data(), v.data(), 2, slots, shape, kc.data(), vc.data());
  EXPECT_EQ(kc, (std::vector<float>{0, 0, 0, 0, 1, 2, 0, 0}));
  EXPECT_EQ(vc, (std::vector<float>{0, 0, 0, 0, 5, 6, 0, 0}));
}

TEST(BlockCopyRef, CopiesWholeBlocks) {
  const KvShape shape{6, 1, 1};
  std::vector<float> c = {0, 1, 2, 3, 4, 5};
  block_copy_ref(c.data(), shape, 2, {{0, 2}, {1, 0}});  // block 2 <- block 0, then block 0 <- block 1
  EXPECT_EQ(c, (std::vector<float>{2, 3, 2, 3, 0, 1}));
}

TEST(EmbeddingAndGemmRef, HandComputed) {
  const std::vector<float> table = {1, 2, 3, 4, 5, 6};  // 3 rows of 2
  const int32_t ids[2] = {2, 0};
  std::vector<float> e(4);
  embedding_ref(table.data(), ids, 2, 2, e.data());
  EXPECT_EQ(e, (std::vector<float>{5, 6, 1, 2}));
  std::vector<float> y(6);
  gemm_ref(e.data(), table.data(), 2, 3, 2, y.data());  // y = e · tableᵀ
  EXPECT_EQ(y, (std::vector<float>{17, 39, 61, 5, 11, 17}));
}


// quant_gemv_ref against the engine's own quantization math: the same E4M3 values and the same
// dequantized product, so the GPU kernel checked against it is checked against the CPU backend.
TEST(QuantGemvRef, AgreesWithTheEngineDequantization) {
  for (int b = 0; b < 256; ++b) {
    const float a = fp8_e4m3_value(uint8_t(b)), e = fp8_e4m3_to_f32(uint8_t(b));
    if (std::isnan(e)) EXPECT_TRUE(std::isnan(a)) << b;
    else EXPECT_EQ(a, e) << b;
  }
  const int m = 3, n = 24, k = 64;
  std::vector<float> w(size_t(n) * k), x(size_t(m) * k);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * float(i)) * (1.0f + float(i % 7));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * float(i));
  for (bool int4 : {false, true}) {
    const QuantLinear q = int4 ? quantize_int4(w.data(), n, k, 16, false) : quantize_fp8(w.data(), n, k, Fp8WeightScales::per_channel);
    const std::vector<float> deq = dequantize(q);
    std::vector<float> zeros(q.zeros.begin(), q.zeros.end()), y(size_t(m) * n);
    const std::vector<uint8_t> packed = int4 ? pack_int4_rows(q.codes, n, k) : q.codes;
    quant_gemv_ref(int4, x.data(), k, packed.data(), q.scales.data(), zeros.data(), int(q.scales.size()), 16, y.data(), m,
                   n, k, false);
    for (int r = 0; r < m; ++r)
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int i = 0; i < k; ++i) s += double(x[size_t(r) * k + i]) * deq[size_t(j) * k + i];
        EXPECT_NEAR(y[size_t(r) * n + j], s, 1e-4 * (1 + std::fabs(s))) << (int4 ? "int4" : "fp8");
      }
  }
}

TEST(LoraRef, MixedAdapterRowsEqualEachRowsMergedWeights) {
  // The batched shrink/expand over rows of different slots (and none) equals, row by row, the
  // dense product with W_s = scale_s · B_s · A_s: y_r = x_r · W_sᵀ.
  std::mt19937_64 rng(5);
  const int rows = 7, n_in = 24, n_out = 9, max_rank = 4, n_slots = 2;
  const std::vector<int32_t> slot = {0, -1, 1, 1, 0, -1, 1};
  const std::vector<float> x = testing::random_bf16(size_t(rows) * n_in, rng);
  const std::vector<float> a = testing::random_bf16(size_t(n_slots) * max_rank * n_in, rng);
  const std::vector<float> b = testing::random_bf16(size_t(n_slots) * n_out * max_rank, rng);
  const std::vector<float> scale = {0.5f, 3.0f};
  std::vector<float> xa(size_t(rows) * max_rank, -1.0f), y(size_t(rows) * (n_out + 2), 1.0f);
  lora_shrink_ref(x.data(), slot.data(), rows, a.data(), scale.data(), n_in, max_rank, xa.data());
  lora_expand_ref(xa.data(), slot.data(), rows, b.data(), n_out, max_rank, y.data(), n_out + 2, 1);
  for (int r = 0; r < rows; ++r) {
    const int s = slot[size_t(r)];
    for (int c = 0; c < n_out + 2; ++c) {
      double want = 1.0;
      if (s >= 0 && c >= 1 && c <= n_out)
        for (int i = 0; i < n_in; ++i) {
          double w = 0.0;  // merged weight W_s[c - 1, i]
          for (int k = 0; k < max_rank; ++k)
            w += double(b[(size_t(s) * n_out + size_t(c - 1)) * max_rank + size_t(k)]) *
                 a[(size_t(s) * max_rank + size_t(k)) * n_in + size_t(i)];
          want += scale[size_t(s)] * w * x[size_t(r) * n_in + size_t(i)];
        }
      EXPECT_NEAR(y[size_t(r) * (n_out + 2) + size_t(c)], want, 1e-4 * (1 + std::abs(want))) << r << "," << c;
    }
    if (s < 0) {
      for (int k = 0; k < max_rank; ++k) EXPECT_EQ(xa[size_t(r) * max_rank + size_t(k)], 0.0f);
    }
  }
}

TEST(LoraRef, FusedSegmentsEqualEachLinearOnItsOwn) {
  // Three linears fused (q|k|v): A stacked by ranks, B by output columns. The shrink over the
  // stacked A and the segmented expand equal each linear's own shrink and expand into its columns.
  std::mt19937_64 rng(9);
  const int rows = 5, n_in = 16, max_rank = 3, n_slots = 2, n_seg = 3;
  const int outs[n_seg] = {6, 4, 5}, seg_end[n_seg] = {6, 10, 15}, n_out = 15;
  const std::vector<int32_t> slot = {1, -1, 0, 1, 0};
  const std::vector<float> x = testing::random_bf16(size_t(rows) * n_in, rng);
  const std::vector<float> scale = {0.5f, 2.0f};
  std::vector<std::vector<float>> a(n_seg), b(n_seg);
  for (int m = 0; m < n_seg; ++m) {
    a[size_t(m)] = testing::random_bf16(size_t(n_slots) * max_rank * n_in, rng);
    b[size_t(m)] = testing::random_bf16(size_t(n_slots) * outs[m] * max_rank, rng);
  }
  // The fused pool: A [slots, n_seg · r, in], B [slots, n_out, r].
  std::vector<float> fa(size_t(n_slots) * n_seg * max_rank * n_in), fb(size_t(n_slots) * n_out * max_rank);
  for (int s = 0; s < n_slots; ++s)
    for (int m = 0; m < n_seg; ++m) {
      std::copy_n(a[size_t(m)].begin() + size_t(s) * max_rank * n_in, size_t(max_rank) * n_in,
                  fa.begin() + (size_t(s) * n_seg + size_t(m)) * max_rank * n_in);
      const int first = m > 0 ? seg_end[m - 1] : 0;
      std::copy_n(b[size_t(m)].begin() + size_t(s) * outs[m] * max_rank, size_t(outs[m]) * max_rank,
                  fb.begin() + (size_t(s) * n_out + size_t(first)) * max_rank);
    }
  const int ld = n_out + 1;
  std::vector<float> xa(size_t(rows) * n_seg * max_rank), y(size_t(rows) * ld, 1.0f), want = y;
  lora_shrink_ref(x.data(), slot.data(), rows, fa.data(), scale.data(), n_in, n_seg * max_rank, xa.data());
  lora_expand_segments_ref(xa.data(), slot.data(), rows, fb.data(), n_out, max_rank, n_seg, seg_end, y.data(), ld, 1);
  for (int m = 0; m < n_seg; ++m) {
    std::vector<float> xm(size_t(rows) * max_rank);
    lora_shrink_ref(x.data(), slot.data(), rows, a[size_t(m)].data(), scale.data(), n_in, max_rank, xm.data());
    lora_expand_ref(xm.data(), slot.data(), rows, b[size_t(m)].data(), outs[m], max_rank, want.data(), ld,
                    1 + (m > 0 ? seg_end[m - 1] : 0));
  }
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
  EXPECT_NE(y, std::vector<float>(y.size(), 1.0f));  // the rows with adapters moved
}

}  // namespace
}  // namespace servelab::kernels
