#include "kernels/ref/quant_gemv_ref.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace servelab::kernels {

float fp8_e4m3_value(uint8_t b) {
  const int sign = b & 0x80 ? -1 : 1, exp = (b >> 3) & 0xf, mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(float(mant), -9);
  return sign * std::ldexp(1.0f + mant / 8.0f, exp - 7);
}

void quant_gemv_ref(bool int4, const float* x, int64_t x_stride, const uint8_t* w, const float* scales,
                    const float* zeros, int n_scales, int group_size, float* y, int m, int n, int k, bool accumulate) {
  for (int j = 0; j < n; ++j) {
    std::vector<double> row(static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) {
      if (!int4) {
        row[size_t(i)] = double(fp8_e4m3_value(w[size_t(j) * k + i])) * scales[n_scales == 1 ? 0 : j];
      } else {
        const uint8_t byte = w[size_t(j) * (k / 2) + i / 2];
        const int q = i % 2 ? byte >> 4 : byte & 0xf;
        const size_t g = size_t(i / group_size) * n + j;
        row[size_t(i)] = (double(q) - zeros[g]) * scales[g];
      }
    }
    for (int r = 0; r < m; ++r) {
      double s = 0;
      for (int i = 0; i < k; ++i) s += double(x[r * x_stride + i]) * row[size_t(i)];
      float& out = y[size_t(r) * n + j];
      out = static_cast<float>(accumulate ? out + s : s);
    }
  }
}

std::vector<uint8_t> pack_int4_rows(const std::vector<uint8_t>& codes, int n, int k) {
  std::vector<uint8_t> p(size_t(n) * (k / 2));
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < k; i += 2)
      p[size_t(j) * (k / 2) + i / 2] =
          uint8_t((codes[size_t(j) * k + i] & 0xf) | ((codes[size_t(j) * k + i + 1] & 0xf) << 4));
  return p;
}

}  // namespace servelab::kernels
