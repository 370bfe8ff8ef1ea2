#pragma once
// KvCacheSpec: what one token slot of a backend's KV arena holds — element type, scale layout,
// block size, and the heads of this rank — and so how many bytes it takes. The backend's
// attention reads and writes slots in this format; the KV manager sizes the arena with
// bytes_per_slot(), the profiler records it, and the simulator prices KV traffic with it.
// Quantized caches (an FP8 element with per-head or per-token scales) are one more value here.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/model/config.h"

namespace servelab {

/// `kv_cache_dtype:` as vLLM names it: auto = the backend's own element type, fp8 = FP8 E4M3.
enum class KvCacheDType { auto_dtype, fp8 };
inline const char* to_string(KvCacheDType d) { return d == KvCacheDType::fp8 ? "fp8" : "auto"; }
/// "auto" or "fp8" ("fp8_e4m3" too); throws std::invalid_argument listing them.
inline KvCacheDType parse_kv_cache_dtype(const std::string& s) {
  if (s == "auto") return KvCacheDType::auto_dtype;
  if (s == "fp8" || s == "fp8_e4m3") return KvCacheDType::fp8;
  throw std::invalid_argument("kv_cache_dtype must be auto or fp8 (got '" + s + "')");
}

/// Where a quantized cache keeps its dequantization scales. Unquantized: none. per_token_head:
/// one fp32 scale (amax / 448) after each (slot, layer, K|V, kv head) row of head_dim E4M3 codes,
/// so a slot's K/V stay self-contained (copies, swaps and prefix sharing move whole rows).
enum class KvScaleLayout { none, per_token_head };

struct KvCacheSpec {
  DType dtype = DType::bf16;        ///< the backend's element type of K and V (auto)
  KvCacheDType cache_dtype = KvCacheDType::auto_dtype;  ///< fp8: E4M3 elements whatever dtype says
  KvScaleLayout scales = KvScaleLayout::none;
  int block_size = 0;               ///< paged block size in slots (0: naive, contiguous)
  int n_layers = 0;
  int n_kv_heads = 0;               ///< this rank's KV heads (tensor parallel splits them)
  int head_dim = 0;
  /// A backend's arena may round the bytes of one slot of one (layer, K|V) arena (all its KV
  /// heads' rows) up to a multiple of this: the cuda backend's FP8 arena accounts a slot's codes
  /// and scales padded to 16 bytes (pages of 16 such slots, split by head: kernels/kv_fp8.h), 16;
  /// 1 (default) no rounding.
  int slot_align = 1;

  static int element_bytes(DType d) { return d == DType::f32 ? 4 : 2; }
  /// Bytes of one stored K or V element: 1 for fp8, else element_bytes(dtype).
  int stored_element_bytes() const { return cache_dtype == KvCacheDType::fp8 ? 1 : element_bytes(dtype); }
  /// Bytes of one (layer, K|V, kv head) row of a slot: head_dim elements plus its scale.
  int64_t row_bytes() const {
    return int64_t(head_dim) * stored_element_bytes() + (scales == KvScaleLayout::per_token_head ? 4 : 0);
  }
  /// One slot of one (layer, K|V) arena: n_kv_heads × row_bytes(), rounded up to slot_align.
  int64_t arena_slot_bytes() const {
    const int64_t a = slot_align > 1 ? slot_align : 1, b = int64_t(n_kv_heads) * row_bytes();
    return (b + a - 1) / a * a;
  }
  /// K and V of every layer for one token: 2 × n_layers × n_kv_heads × row_bytes() (head_dim ×
  /// element, plus a 4-byte scale per row for fp8), each arena's share rounded up to slot_align.
  int64_t bytes_per_slot() const { return 2ll * n_layers * arena_slot_bytes(); }
  /// The spec of `model` split over `tensor_parallel` ranks (KV heads divided); fp8 caches keep
  /// per-(token, head) scales.
  static KvCacheSpec of(const ModelConfig& model, DType dtype, int tensor_parallel = 1,
                        KvCacheDType cache_dtype = KvCacheDType::auto_dtype) {
    KvCacheSpec s;
    s.dtype = dtype;
    s.cache_dtype = cache_dtype;
    if (cache_dtype == KvCacheDType::fp8) s.scales = KvScaleLayout::per_token_head;
    s.n_layers = model.n_layers;
    s.n_kv_heads = model.n_kv_heads / (tensor_parallel > 0 ? tensor_parallel : 1);
    s.head_dim = model.head_dim();
    return s;
  }
};

/// The cuda backend's KV arena on one GPU: the dtype's K and V (auto), or FP8 codes and scales
/// with each (layer, K|V) slot padded to 16 bytes (kernels/kv_fp8.h; no padding when n_kv_heads
/// is a multiple of 4). Here so that the backend and make_backend's sizing agree without CUDA.
inline KvCacheSpec cuda_kv_cache_spec(const ModelConfig& model, DType dtype, KvCacheDType cache_dtype) {
  KvCacheSpec s = KvCacheSpec::of(model, dtype, 1, cache_dtype);
  if (cache_dtype == KvCacheDType::fp8) s.slot_align = 16;
  return s;
}

}  // namespace servelab
