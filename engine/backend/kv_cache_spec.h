#pragma once
// KvCacheSpec: what one token slot of a backend's KV arena holds — element type, scale layout,
// block size, and the heads of this rank — and so how many bytes it takes. The backend's
// attention reads and writes slots in this format; the KV manager sizes the arena with
// bytes_per_slot(), the profiler records it, and the simulator prices KV traffic with it.
// Quantized caches (an FP8 element with per-head or per-token scales) are one more value here.
#include <cstdint>
#include <string>

#include "engine/model/config.h"

namespace servelab {

/// Where a quantized cache keeps its dequantization scales. Unquantized: none.
enum class KvScaleLayout { none };

struct KvCacheSpec {
  DType dtype = DType::bf16;        ///< element type of K and V
  KvScaleLayout scales = KvScaleLayout::none;
  int block_size = 0;               ///< paged block size in slots (0: naive, contiguous)
  int n_layers = 0;
  int n_kv_heads = 0;               ///< this rank's KV heads (tensor parallel splits them)
  int head_dim = 0;

  static int element_bytes(DType d) { return d == DType::f32 ? 4 : 2; }
  /// K and V of every layer for one token: 2 × n_layers × n_kv_heads × head_dim × element, plus
  /// the scales the layout keeps per slot (none yet).
  int64_t bytes_per_slot() const {
    return 2ll * n_layers * n_kv_heads * head_dim * element_bytes(dtype);
  }
  /// The spec of `model` split over `tensor_parallel` ranks (KV heads divided).
  static KvCacheSpec of(const ModelConfig& model, DType dtype, int tensor_parallel = 1) {
    KvCacheSpec s;
    s.dtype = dtype;
    s.n_layers = model.n_layers;
    s.n_kv_heads = model.n_kv_heads / (tensor_parallel > 0 ? tensor_parallel : 1);
    s.head_dim = model.head_dim();
    return s;
  }
};

}  // namespace servelab
