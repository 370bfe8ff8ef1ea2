#include "kernels/ref/lora_ref.h"

#include <algorithm>
#include <cmath>

namespace servelab::kernels {

void lora_shrink_ref(const float* x, const int32_t* row_slot, int n_rows, const float* a, const float* scale,
                     int n_in, int max_rank, float* xa) {
  for (int r = 0; r < n_rows; ++r) {
    const int s = row_slot[r];
    for (int k = 0; k < max_rank; ++k) {
      double acc = 0.0;
      if (s >= 0) {
        const float* ak = a + (int64_t(s) * max_rank + k) * n_in;
        for (int i = 0; i < n_in; ++i) acc += double(x[int64_t(r) * n_in + i]) * ak[i];
        acc *= scale[s];
      }
      xa[int64_t(r) * max_rank + k] = static_cast<float>(acc);
    }
  }
}

void lora_expand_ref(const float* xa, const int32_t* row_slot, int n_rows, const float* b, int n_out, int max_rank,
                     float* y, int ld_y, int c0) {
  for (int r = 0; r < n_rows; ++r) {
    const int s = row_slot[r];
    if (s < 0) continue;
    for (int c = 0; c < n_out; ++c) {
      const float* bc = b + (int64_t(s) * n_out + c) * max_rank;
      double acc = 0.0;
      for (int k = 0; k < max_rank; ++k) acc += double(xa[int64_t(r) * max_rank + k]) * bc[k];
      y[int64_t(r) * ld_y + c0 + c] += static_cast<float>(acc);
    }
  }
}

void lora_expand_segments_ref(const float* xa, const int32_t* row_slot, int n_rows, const float* b, int n_out,
                              int max_rank, int n_seg, const int* seg_end, float* y, int ld_y, int c0) {
  const int total = n_seg * max_rank;
  for (int r = 0; r < n_rows; ++r) {
    const int s = row_slot[r];
    if (s < 0) continue;
    for (int c = 0; c < n_out; ++c) {
      int m = 0;
      while (m + 1 < n_seg && c >= seg_end[m]) ++m;
      const float* bc = b + (int64_t(s) * n_out + c) * max_rank;
      double acc = 0.0;
      for (int k = 0; k < max_rank; ++k) acc += double(xa[int64_t(r) * total + m * max_rank + k]) * bc[k];
      y[int64_t(r) * ld_y + c0 + c] += static_cast<float>(acc);
    }
  }
}

void lora_fused_gemm_ref(const float* x, const float* w, int n_rows, int n_out, int n_in, const int32_t* row_slot,
                         const float* a, const float* b, const float* scale, int max_rank, int n_seg, const int* seg_end,
                         float (*round16)(float), float* y) {
  for (int r = 0; r < n_rows; ++r)
    for (int c = 0; c < n_out; ++c) {
      double acc = 0;
      for (int i = 0; i < n_in; ++i) acc += double(x[size_t(r) * n_in + i]) * w[size_t(c) * n_in + i];
      y[size_t(r) * n_out + c] = float(acc);
    }
  const int total = n_seg * max_rank;
  std::vector<float> xa(size_t(n_rows) * total);
  lora_shrink_ref(x, row_slot, n_rows, a, scale, n_in, total, xa.data());
  if (round16)
    for (float& v : xa) v = round16(v);
  lora_expand_segments_ref(xa.data(), row_slot, n_rows, b, n_out, max_rank, n_seg, seg_end, y, n_out, 0);
}

LoraPlanRef lora_plan_ref(const int32_t* row_slot, int n_rows, int n_slots, int tile_rows) {
  LoraPlanRef plan;
  for (int s = 0; s < n_slots; ++s) {
    const int first = int(plan.perm.size());
    for (int r = 0; r < n_rows; ++r)
      if (row_slot[r] == s) plan.perm.push_back(r);
    const int n = int(plan.perm.size()) - first;
    for (int j = 0; j < n; j += tile_rows) plan.tiles.insert(plan.tiles.end(), {s, first + j, std::min(tile_rows, n - j)});
  }
  return plan;
}

void lora_silu_mul_ref(const float* gate_up, const float* delta, const int32_t* row_slot, int n_rows, int ffn,
                       float* act) {
  for (int r = 0; r < n_rows; ++r)
    for (int j = 0; j < ffn; ++j) {
      const int64_t at = int64_t(r) * 2 * ffn + j;
      double g = gate_up[at], u = gate_up[at + ffn];
      if (row_slot[r] >= 0) {
        g += delta[at];
        u += delta[at + ffn];
      }
      act[int64_t(r) * ffn + j] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
}

}  // namespace servelab::kernels
