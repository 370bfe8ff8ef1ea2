#pragma once
// The model the roofline tests count by hand (tests/backend/roofline_bound_test.cpp does the
// count: 1,192 layer parameters, LM head 256, 64 K/V bytes a token in fp32).
#include "engine/model/config.h"

namespace servelab::roofline_test {

/// d 8, 2 layers, 2 heads of 4 (one KV head), FFN 16, vocabulary 32, untied embeddings.
inline ModelConfig hand_model() {
  ModelConfig m;
  m.name = "hand";
  m.hidden_size = 8;
  m.n_layers = 2;
  m.n_heads = 2;
  m.n_kv_heads = 1;
  m.intermediate_size = 16;
  m.vocab_size = 32;
  return m;
}

}  // namespace servelab::roofline_test
