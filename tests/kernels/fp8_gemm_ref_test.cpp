// The FP8 W8A8 references (kernels/ref/fp8_gemm_ref.h) against the engine's own FP8 math
// (engine/model/quant.h), which the cpu backend runs: quantize-then-dequantize of activation rows
// gives fake_quant_fp8_rows's values bit for bit (per tensor and per token), and the scaled
// product equals the product of the dequantized matrices.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/fp8.h"
#include "engine/model/quant.h"
#include "kernels/ref/fp8_gemm_ref.h"

namespace servelab::kernels {
namespace fp8_gemm_ref_test {  // named, not anonymous: a unity batch shares one translation unit

TEST(Fp8GemmRef, QuantizedRowsDequantizeToTheEnginesFakeQuantization) {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int m = 13, k = 40;
  std::vector<float> x(size_t(m) * k);
  for (size_t i = 0; i < x.size(); ++i) x[i] = d(rng) * (i % k == 5 ? 50.0f : 1.0f);  // an outlier channel
  for (int r = 0; r < k; ++r) x[size_t(4) * k + r] = 0.0f;                           // an all-zero row: scale 1
  for (bool per_token : {false, true}) {
    std::vector<uint8_t> codes(x.size());
    std::vector<float> scales(static_cast<size_t>(m));
    fp8_quantize_rows_ref(x.data(), m, k, per_token, codes.data(), scales.data());
    std::vector<float> engine = x;
    fake_quant_fp8_rows(engine.data(), m, k, per_token ? ActivationQuant::fp8_per_token : ActivationQuant::fp8_per_tensor);
    for (int r = 0; r < m; ++r) {
      if (per_token && r == 4) { EXPECT_EQ(scales[r], 1.0f); }
      if (!per_token) { EXPECT_EQ(scales[r], scales[0]) << "one scale for the tensor"; }
      for (int i = 0; i < k; ++i)
        ASSERT_EQ(fp8_e4m3_to_f32(codes[size_t(r) * k + i]) * scales[r], engine[size_t(r) * k + i])
            << (per_token ? "per token" : "per tensor") << " row " << r << " col " << i;
    }
  }
}

TEST(Fp8GemmRef, ScaledProductEqualsTheDequantizedProduct) {
  std::mt19937_64 rng(19);
  std::uniform_int_distribution<int> byte(0, 0x7e);  // finite codes, both signs below
  const int m = 5, n = 7, k = 48;
  std::vector<uint8_t> x(size_t(m) * k), w(size_t(n) * k);
  for (uint8_t& c : x) c = uint8_t(byte(rng) | (rng() % 2 ? 0x80 : 0));
  for (uint8_t& c : w) c = uint8_t(byte(rng) | (rng() % 2 ? 0x80 : 0));
  const std::vector<float> xs = {0.5f, 0.25f, 2.0f, 1.0f, 0.125f}, ws = {1, 2, 3, 0.5f, 0.25f, 4, 1};
  std::vector<float> y(size_t(m) * n);
  fp8_gemm_ref(x.data(), xs.data(), w.data(), ws.data(), y.data(), m, n, k);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double want = 0.0;
      for (int t = 0; t < k; ++t)
        want += double(fp8_e4m3_to_f32(x[size_t(i) * k + t]) * xs[i]) * double(fp8_e4m3_to_f32(w[size_t(j) * k + t]) * ws[j]);
      EXPECT_NEAR(y[size_t(i) * n + j], want, 1e-5 * std::max(1.0, std::fabs(want))) << i << "," << j;
    }
}

}  // namespace fp8_gemm_ref_test
}  // namespace servelab::kernels
