#include "kernels/ref/ops_ref.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

namespace servelab::kernels {

std::vector<float> rope_inv_freq(float theta, int head_dim, const Llama3RopeScaling* scaling) {
  std::vector<float> f(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    double inv = std::pow(double(theta), -2.0 * i / head_dim);
    if (scaling) {  // transformers' _compute_llama3_parameters
      const double low_wavelen = scaling->original_max_position / scaling->low_freq_factor;
      const double high_wavelen = scaling->original_max_position / scaling->high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / inv;
      if (wavelen > low_wavelen) {
        inv /= scaling->factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (scaling->original_max_position / wavelen - scaling->low_freq_factor) /
                              (scaling->high_freq_factor - scaling->low_freq_factor);
        inv = (1.0 - smooth) * inv / scaling->factor + smooth * inv;
      }
    }
    f[i] = static_cast<float>(inv);
  }
  return f;
}

void rope_ref(float* x, int n_tokens, int n_heads, int head_dim, const int32_t* positions, const float* inv_freq) {
  const int half = head_dim / 2;
  for (int t = 0; t < n_tokens; ++t)
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (int64_t(t) * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double angle = double(positions[t]) * double(inv_freq[i]);
        const double c = std::cos(angle), s = std::sin(angle), a = v[i], b = v[i + half];
        v[i] = static_cast<float>(a * c - b * s);
        v[i + half] = static_cast<float>(b * c + a * s);
      }
    }
}

void kv_write_ref(const float* k, const float* v, int n_tokens, const int64_t* slot_mapping, KvShape shape,
                  float* k_cache, float* v_cache) {
  const int64_t row = shape.row_elems();
  for (int t = 0; t < n_tokens; ++t) {
    if (slot_mapping[t] < 0) continue;
    std::memcpy(k_cache + slot_mapping[t] * row, k + t * row, sizeof(float) * row);
    std::memcpy(v_cache + slot_mapping[t] * row, v + t * row, sizeof(float) * row);
  }
}

void rms_norm_ref(const float* x, const float* weight, int n_rows, int d, float eps, float* y) {
  for (int r = 0; r < n_rows; ++r) {
    const float* xr = x + int64_t(r) * d;
    double ss = 0.0;
    for (int i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int i = 0; i < d; ++i) y[int64_t(r) * d + i] = static_cast<float>(xr[i] * inv * weight[i]);
  }
}

void add_rms_norm_ref(const float* x, float* residual, const float* weight, int n_rows, int d, float eps,
                      float* y, float (*round)(float)) {
  for (int64_t i = 0; i < int64_t(n_rows) * d; ++i) {
    const float s = residual[i] + x[i];
    residual[i] = round ? round(s) : s;
  }
  rms_norm_ref(residual, weight, n_rows, d, eps, y);
}

void silu_mul_ref(const float* gate_up, int n_rows, int ffn, float* out) {
  for (int r = 0; r < n_rows; ++r)
    for (int i = 0; i < ffn; ++i) {
      const double g = gate_up[int64_t(r) * 2 * ffn + i], u = gate_up[int64_t(r) * 2 * ffn + ffn + i];
      out[int64_t(r) * ffn + i] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
}

void embedding_ref(const float* table, const int32_t* ids, int n_tokens, int d, float* out) {
  for (int t = 0; t < n_tokens; ++t) std::memcpy(out + int64_t(t) * d, table + int64_t(ids[t]) * d, sizeof(float) * d);
}

void block_copy_ref(float* cache, KvShape shape, int block_size, const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
  const int64_t n = shape.row_elems() * block_size;
  for (const auto& [src, dst] : src_dst) std::memmove(cache + dst * n, cache + src * n, sizeof(float) * n);
}

void block_table_update_ref(int32_t* table, const int32_t* index_block_pairs, int n_updates) {
  for (int i = 0; i < n_updates; ++i) table[index_block_pairs[2 * i]] = index_block_pairs[2 * i + 1];
}

void gemm_ref(const float* x, const float* w, int m, int n, int k, float* y) {
  gemm_ref(x, w, m, n, k, y, false, nullptr);
}

void gemm_ref(const float* x, const float* w, int m, int n, int k, float* y, bool accumulate, float (*round)(float)) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0.0;
      for (int p = 0; p < k; ++p) s += double(x[int64_t(i) * k + p]) * w[int64_t(j) * k + p];
      float& out = y[int64_t(i) * n + j];
      if (accumulate) s += out;
      out = round ? round(static_cast<float>(s)) : static_cast<float>(s);
    }
}

void gate_up_silu_ref(const float* x, const float* w, int m, int ffn, int k, float* act, float (*round)(float)) {
  std::vector<float> gate_up(size_t(m) * 2 * ffn);
  gemm_ref(x, w, m, 2 * ffn, k, gate_up.data(), false, round);
  for (int r = 0; r < m; ++r)
    for (int i = 0; i < ffn; ++i) {
      const float g = gate_up[size_t(r) * 2 * ffn + i], u = gate_up[size_t(r) * 2 * ffn + ffn + i];
      const float a = g / (1.0f + std::exp(-g)) * u;
      act[size_t(r) * ffn + i] = round ? round(a) : a;
    }
}

void gather_columns_ref(const float* x, const int32_t* perm, int rows, int cols, float* out) {
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < cols; ++i) out[int64_t(r) * cols + i] = x[int64_t(r) * cols + perm[i]];
}

}  // namespace servelab::kernels
