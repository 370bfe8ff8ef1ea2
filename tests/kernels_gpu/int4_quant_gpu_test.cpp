// INT4 quantize-on-load and dequantization on the GPU (kernels/int4_quant.h) against
// engine/model/quant.h's quantize_int4 and dequantize (the cpu backend's reference): the same
// codes, scales and zeros for AWQ's asymmetric and GPTQ's symmetric formulas, and the same
// matrix back (to bf16 rounding). Skipped without a device.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/half.h"
#include "engine/model/quant.h"
#include "kernels/int4_quant.h"
#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace int4_quant_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;

TEST(Int4QuantGpu, CodesScalesAndZerosMatchQuantizeInt4) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  std::normal_distribution<float> d(0.0f, 0.05f);
  struct Shape {
    int rows, cols, group;
  };
  for (const Shape& sh : {Shape{1, 16, 16}, Shape{37, 384, 128}, Shape{300, 704, 64}})
    for (bool symmetric : {false, true}) {
      SCOPED_TRACE(std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " group " + std::to_string(sh.group) +
                   (symmetric ? " gptq" : " awq"));
      std::vector<uint16_t> wb(size_t(sh.rows) * sh.cols);
      std::vector<float> wf(wb.size());
      for (size_t i = 0; i < wb.size(); ++i) {
        wb[i] = f32_to_bf16(d(rng) + (i % 7 == 0 ? 0.02f : 0.0f));  // groups not centred on 0
        wf[i] = bf16_to_f32(wb[i]);
      }
      const QuantLinear q = quantize_int4(wf.data(), sh.rows, sh.cols, sh.group, symmetric);
      const int groups = sh.cols / sh.group;
      DeviceBuffer dw = testing::upload(wb), codes(size_t(sh.rows) * sh.cols / 2), scales(size_t(groups) * sh.rows * 4),
                   zeros(size_t(groups) * sh.rows * 4), back(wb.size() * 2);
      codes.poison();
      back.poison();
      quantize_int4_weight(dw.get(), sh.rows, sh.cols, sh.group, symmetric, codes.get<uint8_t>(), scales.get<float>(),
                           zeros.get<float>());
      const std::vector<uint8_t> c = testing::download<uint8_t>(codes, size_t(sh.rows) * sh.cols / 2);
      const std::vector<float> s = testing::download<float>(scales, size_t(groups) * sh.rows);
      const std::vector<float> z = testing::download<float>(zeros, size_t(groups) * sh.rows);
      for (size_t i = 0; i < s.size(); ++i) {
        ASSERT_EQ(s[i], q.scales[i]) << "scale " << i;
        ASSERT_EQ(z[i], float(q.zeros[i])) << "zero " << i;
      }
      for (int r = 0; r < sh.rows; ++r)
        for (int k = 0; k < sh.cols; ++k) {
          const uint8_t b = c[size_t(r) * sh.cols / 2 + k / 2];
          ASSERT_EQ(k % 2 ? b >> 4 : b & 0xf, q.codes[size_t(r) * sh.cols + k]) << "row " << r << " col " << k;
        }
      dequantize_int4(codes.get<uint8_t>(), scales.get<float>(), zeros.get<float>(), sh.rows, sh.cols, sh.group,
                      back.get(), nullptr);
      const std::vector<float> got = testing::download_bf16(back, wb.size());
      const std::vector<float> ref = dequantize(q);
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(got[i], round_bf16(ref[i])) << "element " << i;
    }
}

// Act-order INT4's activations in the codes' order: gather_columns against gather_columns_ref bit
// for bit (a copy), on rows 1 to 37 and widths 16 to 11008 (llama2-7b's down input), a shuffled
// permutation and the identity.
TEST(Int4QuantGpu, GatherColumnsTakesTheCodesOrder) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const auto [rows, cols] : {std::pair{1, 16}, std::pair{3, 704}, std::pair{37, 4096}, std::pair{5, 11008}})
    for (bool identity : {false, true}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (identity ? " identity" : " shuffled"));
      std::vector<float> x(size_t(rows) * cols);
      for (float& v : x) v = round_bf16(d(rng));
      std::vector<int32_t> perm(static_cast<size_t>(cols));
      for (int i = 0; i < cols; ++i) perm[size_t(i)] = i;
      if (!identity) std::shuffle(perm.begin(), perm.end(), rng);
      DeviceBuffer dx = testing::upload_bf16(x), dp = testing::upload(perm), out(x.size() * 2);
      out.poison();
      gather_columns(dx.get(), dp.get<int32_t>(), out.get(), rows, cols, nullptr);
      std::vector<float> ref(x.size());
      gather_columns_ref(x.data(), perm.data(), rows, cols, ref.data());
      EXPECT_EQ(testing::download_bf16(out, x.size()), ref);
    }
  EXPECT_THROW(gather_columns(nullptr, nullptr, nullptr, 1, 0, nullptr), std::invalid_argument);
}

// Act-order INT4 with the gather folded into the norm before the product: rms_norm_permuted and
// add_rms_norm_permuted give the bits of the plain norm followed by gather_columns (and the same
// residual), at widths the plain kernel runs from registers (704, 4096) and past them (11008).
TEST(Int4QuantGpu, NormsWriteTheirOutputInTheCodesOrder) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(11);
  for (const ScalarType t : testing::kStorageTypes)
    for (const auto [rows, d] : {std::pair{1, 16}, std::pair{3, 704}, std::pair{37, 4096}, std::pair{5, 11008}}) {
#if !defined(SERVELAB_KERNELS_FP16)
      if (t == ScalarType::f16) continue;  // built with -DSERVELAB_KERNELS_FP16=OFF: the norms have no f16 variant
#endif
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(d) + (t == ScalarType::bf16 ? " bf16" : " f16"));
      const size_t n = size_t(rows) * d;
      const std::vector<float> x = testing::random16(t, n, rng), r = testing::random16(t, n, rng),
                               w = testing::random16(t, size_t(d), rng);
      std::vector<int32_t> perm(static_cast<size_t>(d));
      for (int i = 0; i < d; ++i) perm[size_t(i)] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
      DeviceBuffer dx = testing::upload16(t, x), dw = testing::upload16(t, w), dp = testing::upload(perm);
      DeviceBuffer plain(n * 2), gathered(n * 2), folded(n * 2);
      folded.poison();
      rms_norm(t, dx.get(), dw.get(), plain.get(), rows, d, 1e-5f, nullptr);
      gather_columns(plain.get(), dp.get<int32_t>(), gathered.get(), rows, d, nullptr);  // bf16 or f16: 16-bit moves
      rms_norm_permuted(t, dx.get(), dw.get(), folded.get(), dp.get<int32_t>(), rows, d, 1e-5f, nullptr);
      EXPECT_EQ(testing::download16(t, folded, n), testing::download16(t, gathered, n)) << "rms_norm";
      DeviceBuffer ra = testing::upload16(t, r), rb = testing::upload16(t, r);
      folded.poison();
      add_rms_norm(t, dx.get(), ra.get(), dw.get(), plain.get(), rows, d, 1e-5f, nullptr);
      gather_columns(plain.get(), dp.get<int32_t>(), gathered.get(), rows, d, nullptr);
      add_rms_norm_permuted(t, dx.get(), rb.get(), dw.get(), folded.get(), dp.get<int32_t>(), rows, d, 1e-5f, nullptr);
      EXPECT_EQ(testing::download16(t, folded, n), testing::download16(t, gathered, n)) << "add_rms_norm";
      EXPECT_EQ(testing::download16(t, rb, n), testing::download16(t, ra, n)) << "the residual";
    }
  EXPECT_THROW(rms_norm_permuted(ScalarType::bf16, nullptr, nullptr, nullptr, nullptr, 1, 16, 1e-5f, nullptr),
               std::invalid_argument);
}

}  // namespace int4_quant_gpu_test
}  // namespace servelab::kernels
