// The CPU backend's KV arena: one plane per (layer, K or V, kv head), a row per slot (fp32, or
// fp8 E4M3 with its scale), the copies copy-on-write asks for, and swapping runs of slots to and
// from a host pool. The forward that reads and writes it is in cpu_backend.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "engine/backend/cpu_backend.h"
#include "engine/model/fp8.h"

namespace servelab {

void CpuBackend::init_kv(int64_t n_slots) {
  if (n_slots <= 0)
    throw std::invalid_argument("CpuBackend::init_kv: n_slots (" + std::to_string(n_slots) + ") must be >= 1");
  const int64_t n_bytes = n_slots * kv_bytes_per_slot();
  try {
    arena_.assign(static_cast<size_t>(n_bytes), 0);
    arena_.shrink_to_fit();
  } catch (const std::bad_alloc&) {
    throw std::runtime_error("CpuBackend::init_kv: cannot allocate " + std::to_string(n_bytes) + " bytes for " +
                             std::to_string(n_slots) + " KV slots; lower kv_cache_bytes");
  }
  n_slots_ = n_slots;
}

uint8_t* CpuBackend::plane_bytes(int layer, int kind, int kv_head) {
  const int64_t plane = (int64_t(layer) * 2 + kind) * config().n_kv_heads + kv_head;
  return arena_.data() + plane * n_slots_ * row_bytes_;
}

float* CpuBackend::kv_plane(int layer, int kind, int kv_head) {
  return reinterpret_cast<float*>(plane_bytes(layer, kind, kv_head));
}

void CpuBackend::store_kv(int layer, int kind, int kv_head, int64_t slot, const float* row) {
  const int hd = config().head_dim();
  uint8_t* dst = plane_bytes(layer, kind, kv_head) + slot * row_bytes_;
  if (kv_cache_dtype_ != KvCacheDType::fp8) {
    std::memcpy(dst, row, sizeof(float) * hd);
    return;
  }
  float amax = 0.0f;
  for (int i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(row[i]));
  const float scale = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f, inv = 1.0f / scale;
  for (int i = 0; i < hd; ++i) dst[i] = f32_to_fp8_e4m3(row[i] * inv);
  std::memcpy(dst + hd, &scale, sizeof scale);
}

void CpuBackend::copy_slots(std::span<const KvCopy> copies) {
  const ModelConfig& c = config();
  for (const KvCopy& cp : copies) {
    if (cp.n_slots <= 0) continue;
    check_slot(cp.src_slot, "copy source");
    check_slot(cp.src_slot + cp.n_slots - 1, "copy source");
    check_slot(cp.dst_slot, "copy destination");
    check_slot(cp.dst_slot + cp.n_slots - 1, "copy destination");
    for (int l = 0; l < c.n_layers; ++l)
      for (int kind : {kKeys, kValues})
        for (int g = 0; g < c.n_kv_heads; ++g) {
          uint8_t* plane = plane_bytes(l, kind, g);
          std::memmove(plane + cp.dst_slot * row_bytes_, plane + cp.src_slot * row_bytes_, size_t(cp.n_slots * row_bytes_));
        }
  }
}

std::unique_ptr<HostKvPool> CpuBackend::make_host_pool(int64_t n_slots) {
  if (n_slots <= 0)
    throw std::invalid_argument("CpuBackend::make_host_pool: n_slots (" + std::to_string(n_slots) + ") must be >= 1");
  const int64_t bytes = n_slots * kv_bytes_per_slot();
  // Not zeroed: the pages are committed when a swap first writes them.
  auto* data = new (std::nothrow) uint8_t[static_cast<size_t>(bytes)];
  if (!data)
    throw std::runtime_error("CpuBackend: cannot allocate " + std::to_string(bytes) + " bytes for the swap pool of " +
                             std::to_string(n_slots) + " KV slots; lower engine.swap_space");
  return std::make_unique<HostKvPool>(data, nullptr, n_slots, kv_bytes_per_slot(), false,
                                      [](void* p) { delete[] static_cast<uint8_t*>(p); });
}

uint8_t* CpuBackend::pool_plane(const HostKvPool& pool, int layer, int kind, int kv_head) const {
  const int64_t plane = (int64_t(layer) * 2 + kind) * config().n_kv_heads + kv_head;
  return reinterpret_cast<uint8_t*>(pool.data()) + plane * pool.n_slots() * row_bytes_;
}

void CpuBackend::swap_out(std::span<const KvSwap> runs, HostKvPool& pool) {
  check_pool(pool, "CpuBackend::swap_out");
  pool.check(runs, n_slots_, "CpuBackend::swap_out");
  const ModelConfig& c = config();
  const int64_t rb = row_bytes_;
  for (int l = 0; l < c.n_layers; ++l)
    for (int kind : {kKeys, kValues})
      for (int g = 0; g < c.n_kv_heads; ++g) {
        const uint8_t* plane = plane_bytes(l, kind, g);
        uint8_t* host = pool_plane(pool, l, kind, g);
        for (const KvSwap& r : runs)
          if (r.n_slots > 0) std::memcpy(host + r.host_slot * rb, plane + r.device_slot * rb, size_t(r.n_slots * rb));
      }
}

void CpuBackend::swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) {
  check_pool(pool, "CpuBackend::swap_in");
  pool.check(runs, n_slots_, "CpuBackend::swap_in");
  const ModelConfig& c = config();
  const int64_t rb = row_bytes_;
  for (int l = 0; l < c.n_layers; ++l)
    for (int kind : {kKeys, kValues})
      for (int g = 0; g < c.n_kv_heads; ++g) {
        uint8_t* plane = plane_bytes(l, kind, g);
        const uint8_t* host = pool_plane(pool, l, kind, g);
        for (const KvSwap& r : runs)
          if (r.n_slots > 0) std::memcpy(plane + r.device_slot * rb, host + r.host_slot * rb, size_t(r.n_slots * rb));
      }
}

void CpuBackend::check_pool(const HostKvPool& pool, const char* who) const {
  if (!pool.data() || pool.bytes_per_slot() != kv_bytes_per_slot())
    throw std::invalid_argument(std::string(who) + ": the host pool was not made by this backend (" +
                                std::to_string(pool.bytes_per_slot()) + " bytes per slot, this backend's are " +
                                std::to_string(kv_bytes_per_slot()) + ")");
}

}  // namespace servelab
