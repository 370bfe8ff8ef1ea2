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

namespace {
constexpr int64_t kPage = 16;  // slots a page
int64_t page_at(int64_t slot, int h, int n_kv, int hd) {
  return slot / kPage * kPage * kv_fp8_slot_bytes_ref(n_kv, hd) + h * kPage * (int64_t(hd) + 4);
}
}  // namespace

int64_t kv_fp8_arena_slots_ref(int64_t n_slots) { return (n_slots + kPage - 1) / kPage * kPage; }

int64_t kv_fp8_codes_at_ref(int64_t slot, int h, int n_kv_heads, int head_dim) {
  return page_at(slot, h, n_kv_heads, head_dim) + slot % kPage * head_dim;
}

int64_t kv_fp8_scale_at_ref(int64_t slot, int h, int n_kv_heads, int head_dim) {
  return page_at(slot, h, n_kv_heads, head_dim) + kPage * head_dim + slot % kPage * 4;
}

std::vector<uint8_t> kv_fp8_pack_ref(const std::vector<float>& cache, const KvShape& shape) {
  const int hd = shape.head_dim, n_kv = shape.n_kv_heads;
  std::vector<uint8_t> arena(size_t(kv_fp8_arena_slots_ref(shape.n_slots) * kv_fp8_slot_bytes_ref(n_kv, hd)), 0);
  for (int64_t s = 0; s < shape.n_slots; ++s)
    for (int h = 0; h < n_kv; ++h) {
      const float scale = quantize_kv_row_fp8_ref(cache.data() + (s * n_kv + h) * hd, hd,
                                                  arena.data() + kv_fp8_codes_at_ref(s, h, n_kv, hd));
      std::memcpy(arena.data() + kv_fp8_scale_at_ref(s, h, n_kv, hd), &scale, 4);
    }
  return arena;
}

std::vector<float> kv_fp8_unpack_ref(const std::vector<uint8_t>& arena, const KvShape& shape) {
  const int hd = shape.head_dim, n_kv = shape.n_kv_heads;
  std::vector<float> cache(size_t(shape.n_slots * shape.row_elems()));
  for (int64_t s = 0; s < shape.n_slots; ++s)
    for (int h = 0; h < n_kv; ++h) {
      float scale;
      std::memcpy(&scale, arena.data() + kv_fp8_scale_at_ref(s, h, n_kv, hd), 4);
      dequantize_kv_row_fp8_ref(arena.data() + kv_fp8_codes_at_ref(s, h, n_kv, hd), scale, hd,
                                cache.data() + (s * n_kv + h) * hd);
    }
  return cache;
}

}  // namespace servelab::kernels
