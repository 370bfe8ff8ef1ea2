#pragma once
// QkvArgs (kernels/ops.h) for a q|k|v buffer of whole rows (row stride = the q|k|v width), as the
// RoPE / K/V-write GPU tests build them.
#include <cstdint>

#include "kernels/ops.h"

namespace servelab::kernels::testing {

struct QkvHeads {
  int heads = 0, kv_heads = 0, head_dim = 0;
  int width() const { return (heads + 2 * kv_heads) * head_dim; }
};

inline QkvArgs qkv_args(ScalarType t, void* qkv, int n_tokens, QkvHeads h, const void* bias, const int32_t* positions,
                        const float* inv_freq, const int64_t* slot_mapping, void* k_cache, void* v_cache) {
  QkvArgs a;
  a.dtype = t;
  a.qkv = qkv;
  a.qkv_row_stride = h.width();
  a.n_tokens = n_tokens;
  a.n_heads = h.heads;
  a.n_kv_heads = h.kv_heads;
  a.head_dim = h.head_dim;
  a.bias = bias;
  a.positions = positions;
  a.inv_freq = inv_freq;
  a.slot_mapping = slot_mapping;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  return a;
}

}  // namespace servelab::kernels::testing
