#include "kernels/ref/kv_fp8_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/model/fp8.h"

namespace servelab::kernels {

float quantize_kv_row_fp8_ref(const float* row, int head_dim, uint8_t* codes) {
  float amax = 0.0f;
  for (int i = 0; i < head_dim; ++i) amax = std::max(amax, std::fabs(row[i]));
  const float scale = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f, inv = 1.0f / scale;
  for (int i = 0; i < head_dim; ++i) codes[i] = f32_to_fp8_e4m3(row[i] * inv);
  return scale;
}

void dequantize_kv_row_fp8_ref(const uint8_t* codes, float scale, int head_dim, float* out) {
  for (int i = 0; i < head_dim; ++i) out[i] = fp8_e4m3_to_f32(codes[i]) * scale;
}

int64_t kv_fp8_slot_bytes_ref(int n_kv_heads, int head_dim) {
  return int64_t(n_kv_heads) * head_dim + (int64_t(n_kv_heads) * 4 + 15) / 16 * 16;
}

std::vector<uint8_t> kv_fp8_pack_ref(const std::vector<float>& cache, const KvShape& shape) {
  const int hd = shape.head_dim, n_kv = shape.n_kv_heads;
  const int64_t sb = kv_fp8_slot_bytes_ref(n_kv, hd);
  std::vector<uint8_t> arena(size_t(shape.n_slots * sb), 0);
  for (int64_t s = 0; s < shape.n_slots; ++s)
    for (int h = 0; h < n_kv; ++h) {
      uint8_t* slot = arena.data() + s * sb;
      const float scale = quantize_kv_row_fp8_ref(cache.data() + (s * n_kv + h) * hd, hd, slot + int64_t(h) * hd);
      std::memcpy(slot + int64_t(n_kv) * hd + 4 * h, &scale, 4);
    }
  return arena;
}

std::vector<float> kv_fp8_unpack_ref(const std::vector<uint8_t>& arena, const KvShape& shape) {
  const int hd = shape.head_dim, n_kv = shape.n_kv_heads;
  const int64_t sb = kv_fp8_slot_bytes_ref(n_kv, hd);
  std::vector<float> cache(size_t(shape.n_slots * shape.row_elems()));
  for (int64_t s = 0; s < shape.n_slots; ++s)
    for (int h = 0; h < n_kv; ++h) {
      const uint8_t* slot = arena.data() + s * sb;
      float scale;
      std::memcpy(&scale, slot + int64_t(n_kv) * hd + 4 * h, 4);
      dequantize_kv_row_fp8_ref(slot + int64_t(h) * hd, scale, hd, cache.data() + (s * n_kv + h) * hd);
    }
  return cache;
}

}  // namespace servelab::kernels
