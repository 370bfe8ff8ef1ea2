// The FP8 W8A8 prefill path (kernels/fp8_quant.h, kernels/fp8_gemm.h) against its references on
// awkward shapes: activation codes and scales bit for bit (per tensor and per token, strided
// rows), weight quantization against engine/model/quant.h's quantize_fp8 (per channel, and per
// tensor over runs of rows as a fused Q|K|V keeps), and the scaled product in all four scale
// layouts, eagerly and inside a CUDA graph. Skipped without a device.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/half.h"
#include "engine/model/quant.h"
#include "kernels/fp8_gemm.h"
#include "kernels/fp8_quant.h"
#include "kernels/ref/fp8_gemm_ref.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace fp8_gemm_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;

/// bf16 bits of n normal draws times `scale`, with a few channels 30x larger (outliers).
std::vector<uint16_t> random_rows(size_t n, int cols, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = f32_to_bf16(d(rng) * (i % cols == 3 ? 30.0f : 1.0f));
  return v;
}

std::vector<float> bf16_floats(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
  return f;
}

TEST(Fp8QuantGpu, ActivationCodesAndScalesMatchTheReferenceBitForBit) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(7);
  for (int m : {1, 17, 130})
    for (int k : {8, 72, 4104})
      for (Fp8ActScales mode : {Fp8ActScales::per_tensor, Fp8ActScales::per_token, Fp8ActScales::fixed}) {
        const bool per_token = mode == Fp8ActScales::per_token, fixed = mode == Fp8ActScales::fixed;
        SCOPED_TRACE("m=" + std::to_string(m) + " k=" + std::to_string(k) +
                     (per_token ? " per token" : fixed ? " fixed" : " per tensor"));
        const int stride = k + 16;
        const std::vector<uint16_t> xb = random_rows(size_t(m) * stride, stride, rng, 0.5f);
        std::vector<float> xf(size_t(m) * k);  // the rows without their padding
        for (int r = 0; r < m; ++r)
          for (int i = 0; i < k; ++i) xf[size_t(r) * k + i] = bf16_to_f32(xb[size_t(r) * stride + i]);
        std::vector<uint8_t> ref_codes(xf.size());
        std::vector<float> ref_scales(static_cast<size_t>(m));
        // Fixed: a checkpoint's static input scale, small enough that the rows' largest values
        // (|x| up to ~2) pass 448 · scale and saturate.
        const float fixed_scale = 0.0025f;
        if (fixed) fp8_quantize_rows_fixed_ref(xf.data(), m, k, fixed_scale, ref_codes.data(), ref_scales.data());
        else fp8_quantize_rows_ref(xf.data(), m, k, per_token, ref_codes.data(), ref_scales.data());
        DeviceBuffer dx = testing::upload(xb), codes(xf.size()), scales(size_t(m) * 4), amax(4);
        codes.poison();
        scales.poison();
        Fp8QuantizeArgs a;
        a.x = dx.get();
        a.x_stride = stride;
        a.m = m;
        a.k = k;
        a.scales = mode;
        a.codes = codes.get<uint8_t>();
        a.row_scales = scales.get<float>();
        a.amax = amax.get<float>();
        a.fixed_scale = fixed ? fixed_scale : 0.0f;
        quantize_fp8_activations(a, nullptr);
        const std::vector<uint8_t> got = testing::download<uint8_t>(codes, xf.size());
        const std::vector<float> got_scales = testing::download<float>(scales, size_t(m));
        for (int r = 0; r < m; ++r) ASSERT_EQ(got_scales[r], ref_scales[r]) << "row " << r;
        int64_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i) differ += got[i] != ref_codes[i];
        EXPECT_EQ(differ, 0) << "codes that differ from the reference's";
      }
}

TEST(Fp8QuantGpu, WeightQuantizationMatchesQuantizeFp8) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(11);
  const int cols = 264;
  const std::vector<int64_t> runs = {40, 8, 8};  // a Q|K|V matrix: one per-tensor scale each
  const int rows = 56;
  const std::vector<uint16_t> wb = random_rows(size_t(rows) * cols, cols, rng, 0.05f);
  const std::vector<float> wf = bf16_floats(wb);
  for (bool per_channel : {false, true}) {
    SCOPED_TRACE(per_channel ? "per channel" : "per tensor over runs");
    DeviceBuffer dw = testing::upload(wb), codes(wf.size()), scales(size_t(rows) * 4);
    codes.poison();
    quantize_fp8_weight(dw.get(), rows, cols, runs, per_channel, codes.get<uint8_t>(), scales.get<float>());
    const std::vector<uint8_t> got = testing::download<uint8_t>(codes, wf.size());
    const std::vector<float> got_scales = testing::download<float>(scales, size_t(rows));
    int64_t first = 0;
    for (int64_t n : runs) {
      const QuantLinear q = quantize_fp8(wf.data() + first * cols, n, cols,
                                         per_channel ? Fp8WeightScales::per_channel : Fp8WeightScales::per_tensor);
      for (int64_t r = 0; r < n; ++r) {
        ASSERT_EQ(got_scales[size_t(first + r)], q.scales[q.scales.size() == 1 ? 0 : size_t(r)]) << "row " << first + r;
        for (int i = 0; i < cols; ++i)
          ASSERT_EQ(got[size_t((first + r) * cols + i)], q.codes[size_t(r * cols + i)]) << "row " << first + r;
      }
      first += n;
    }
  }
}

TEST(Fp8GemmGpu, ScaledProductMatchesTheReferenceInEveryScaleLayout) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(3);
  Fp8Gemm gemm;
  struct Shape {
    int m, n, k;
  };
  for (const Shape& sh : {Shape{1, 8, 16}, Shape{17, 72, 272}, Shape{130, 264, 1040}, Shape{333, 1000, 4096}})
    for (bool x_uniform : {true, false})
      for (bool w_uniform : {true, false})
        for (bool graph : {false, true}) {
          SCOPED_TRACE("M=" + std::to_string(sh.m) + " N=" + std::to_string(sh.n) + " K=" + std::to_string(sh.k) +
                       (x_uniform ? " x/tensor" : " x/token") + (w_uniform ? " w/tensor" : " w/channel") +
                       (graph ? " graph" : ""));
          const int m = sh.m, n = sh.n, k = sh.k;
          std::uniform_int_distribution<int> byte(0, 255);
          std::uniform_real_distribution<float> pos(0.001f, 0.01f);
          auto codes = [&](size_t count) {
            std::vector<uint8_t> c(count);
            for (uint8_t& b : c) {
              b = uint8_t(byte(rng));
              if ((b & 0x7f) == 0x7f) b = 0x3f;  // no NaN codes
            }
            return c;
          };
          const std::vector<uint8_t> x = codes(size_t(m) * k), w = codes(size_t(n) * k);
          std::vector<float> xs(size_t(m), pos(rng)), ws(size_t(n), pos(rng));
          if (!x_uniform)
            for (float& s : xs) s = pos(rng);
          if (!w_uniform)
            for (float& s : ws) s = pos(rng);
          std::vector<float> ref(size_t(m) * n);
          fp8_gemm_ref(x.data(), xs.data(), w.data(), ws.data(), ref.data(), m, n, k);
          DeviceBuffer dx = testing::upload(x), dw = testing::upload(w), dxs = testing::upload(xs),
                       dws = testing::upload(ws), dy(size_t(m) * n * 2);
          dy.poison();
          Fp8GemmArgs a;
          a.x = dx.get<uint8_t>();
          a.x_scales = dxs.get<float>();
          a.x_uniform = x_uniform;
          a.w = dw.get<uint8_t>();
          a.w_scales = dws.get<float>();
          a.w_uniform = w_uniform;
          a.y = dy.get();
          a.m = m;
          a.n = n;
          a.k = k;
          if (graph) {
            gemm.run(a, nullptr);  // the algorithm is chosen outside the capture, as the backend's warm-up does
            dy.poison();
            testing::CapturedGraph g([&](cudaStream_t s) { gemm.run(a, s); });
            g.replay();
          } else {
            gemm.run(a, nullptr);
          }
          const std::vector<float> got = testing::download_bf16(dy, ref.size());
          double num = 0, den = 0;
          for (size_t i = 0; i < ref.size(); ++i) {
            ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " unwritten";
            num += (got[i] - ref[i]) * double(got[i] - ref[i]);
            den += double(ref[i]) * ref[i];
          }
          EXPECT_LT(std::sqrt(num / den), testing::kBf16Tolerance);
        }
  std::printf("  cuBLASLt outer-vector FP8 scales: %s\n",
              gemm.outer_vec_unsupported() ? "unsupported here (scaled by a second kernel)" : "native");
}

TEST(Fp8GemmGpu, BadArgumentsNameTheField) {
  Fp8GemmArgs a;
  a.m = 4, a.n = 12, a.k = 32;
  try {
    validate(a);
    FAIL() << "n = 12 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("n (12) must be a positive multiple of 8"), std::string::npos) << e.what();
  }
  Fp8QuantizeArgs q;
  q.m = 2, q.k = 12, q.x_stride = 12;
  EXPECT_THROW(validate(q), std::invalid_argument);
}

}  // namespace fp8_gemm_gpu_test
}  // namespace servelab::kernels
