#include "kernels/ref/fp8_gemm_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model/fp8.h"

namespace servelab::kernels {

void fp8_quantize_rows_ref(const float* x, int m, int k, bool per_token, uint8_t* codes, float* scales) {
  auto amax_of = [&](int first_row, int rows) {
    float a = 0.0f;
    for (int64_t i = int64_t(first_row) * k; i < int64_t(first_row + rows) * k; ++i) a = std::max(a, std::fabs(x[i]));
    return a;
  };
  auto scale_of = [](float amax) { return amax > 0.0f ? amax / kFp8E4m3Max : 1.0f; };
  const float tensor_scale = per_token ? 0.0f : scale_of(amax_of(0, m));
  for (int r = 0; r < m; ++r) {
    const float s = per_token ? scale_of(amax_of(r, 1)) : tensor_scale;
    scales[r] = s;
    const float inv = 1.0f / s;
    for (int i = 0; i < k; ++i) codes[int64_t(r) * k + i] = f32_to_fp8_e4m3(x[int64_t(r) * k + i] * inv);
  }
}

void fp8_quantize_rows_fixed_ref(const float* x, int m, int k, float scale, uint8_t* codes, float* scales) {
  const float inv = 1.0f / scale;
  for (int r = 0; r < m; ++r) {
    scales[r] = scale;
    for (int i = 0; i < k; ++i) codes[int64_t(r) * k + i] = f32_to_fp8_e4m3(x[int64_t(r) * k + i] * inv);
  }
}

void fp8_gemm_ref(const uint8_t* x, const float* x_scales, const uint8_t* w, const float* w_scales, float* y, int m,
                  int n, int k) {
  float table[256];
  for (int b = 0; b < 256; ++b) table[b] = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int t = 0; t < k; ++t) acc += double(table[x[int64_t(i) * k + t]]) * table[w[int64_t(j) * k + t]];
      y[int64_t(i) * n + j] = static_cast<float>(acc * x_scales[i] * w_scales[j]);
    }
}

}  // namespace servelab::kernels
