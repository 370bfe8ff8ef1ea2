#pragma once
// Step shapes the cost-model tests price: a decode of `batch` sequences at `context`, and a
// prefill chunk of `tokens` rows after `context` cached ones (one sequence, its last row drawn).
#include <cstdint>

#include "engine/backend/cost_model.h"

namespace servelab::test_shapes {

inline StepShape decode_shape(int batch, int context) {
  StepShape s;
  s.n_tokens = s.n_sampled = s.n_seqs = batch;
  s.sum_context = int64_t(batch) * context;
  s.max_context = context;
  s.decode_context = double(batch) * context;
  s.attention_pairs = s.decode_context;
  return s;
}

inline StepShape prefill_shape(int tokens, int context) {
  StepShape s;
  s.n_tokens = tokens;
  s.n_sampled = s.n_seqs = 1;
  s.sum_context = s.max_context = context + tokens;
  s.prefill_pairs = double(tokens) * context + 0.5 * tokens * (tokens + 1.0);
  s.attention_pairs = s.prefill_pairs;
  return s;
}

}  // namespace servelab::test_shapes
