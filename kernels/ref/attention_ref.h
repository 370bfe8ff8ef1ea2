#pragma once
// Plain C++ reference for attention over the KV cache: every query row of every sequence, causal,
// GQA, either KV layout. Straight loops in double precision; the oracle for the CUDA decode
// (split-context) and prefill (tiled, online softmax) kernels.
#include <cstdint>

#include "kernels/step_input.h"

namespace servelab::kernels {

/// Attention for a varlen batch whose K/V are already in the cache (written before attention).
/// Row r of sequence s sits at position context_lens[s] - q_len(s) + (r - query_start[s]) and
/// attends to positions [0, that position] through `kv`.
struct AttentionRefArgs {
  const float* q = nullptr;        ///< [n_tokens, n_heads, head_dim]
  const float* k_cache = nullptr;  ///< [n_slots, n_kv_heads, head_dim]
  const float* v_cache = nullptr;  ///< [n_slots, n_kv_heads, head_dim]
  KvShape shape;
  int n_heads = 0;                 ///< multiple of shape.n_kv_heads (GQA group = ratio)
  int n_seqs = 0;
  const int32_t* query_start = nullptr;   ///< [n_seqs + 1]
  const int32_t* context_lens = nullptr;  ///< [n_seqs]
  KvAddressing kv;
  float scale = 1.0f;              ///< usually 1 / sqrt(head_dim)
  float* out = nullptr;            ///< [n_tokens, n_heads, head_dim]
};

void attention_ref(const AttentionRefArgs& a);

}  // namespace servelab::kernels
