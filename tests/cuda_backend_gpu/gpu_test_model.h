#pragma once
// The small model the cuda backend's GPU tests run: head_dim 64 (the attention kernels take 32,
// 64 or 128), 4 query heads over 2 KV heads (GQA 2, 1 KB of bf16 KV a slot), 2 layers.
#include <string>

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

}  // namespace servelab::testing
