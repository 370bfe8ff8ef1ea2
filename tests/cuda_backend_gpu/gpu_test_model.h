#pragma once
// The small model the cuda backend's GPU tests run: head_dim 64 (the attention kernels take 32,
// 64 or 128), 4 query heads over 2 KV heads (GQA 2, 1 KB of bf16 KV a slot), 2 layers.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "engine/model/config.h"

namespace servelab::testing {

inline ModelConfig gpu_test_model(const std::string& name, int max_position) {
  ModelConfig c;
  c.name = name;
  c.hidden_size = 256;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.intermediate_size = 512;
  c.vocab_size = 1000;
  c.max_position = max_position;
  c.dtype = DType::bf16;
  return c;
}

/// A paged KV manager (blocks of 16, no prefix caching) over `slots` for sequences of up to
/// max_model_len tokens: what the GPU tests hand make_step.
inline std::unique_ptr<KvManager> paged_test_kv(int64_t slots, int max_model_len = 512) {
  KvConfig c;
  c.kind = KvKind::paged;
  c.block_size = 16;
  c.prefix_caching = false;
  c.max_model_len = max_model_len;
  return make_kv_manager(c, slots);
}

/// Holds n slots for s: allocates its first, grows it after.
inline void hold_kv(KvManager& kv, Sequence& s, int n) {
  if (!s.kv.allocated) kv.allocate(s, n);
  else kv.grow(s, n);
}

/// Teacher forcing: each entry of the step marked computed and given the argmax of its row of
/// `logits` (rows of `vocab`) as its next token.
inline void append_argmax(const Batch& b, std::span<const float> logits, int vocab) {
  for (size_t e = 0; e < b.entries.size(); ++e) {
    Sequence& s = *b.entries[e].seq;
    const auto row = logits.subspan(e * size_t(vocab), size_t(vocab));
    s.n_computed = s.n_tokens();
    s.tokens.push_back(static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin()));
  }
}

}  // namespace servelab::testing
