#pragma once
// The LoRA GPU tests' adapter pool over device A, B and scales: seg_out.size() segments (fused
// linears) of seg_out[m] outputs each, their ends accumulated into seg_end.
#include <vector>

#include "kernels/lora.h"

namespace servelab::kernels::testing {

inline LoraPool lora_test_pool(const void* a, const void* b, const float* scale, int n_slots, int n_in, int max_rank,
                               const std::vector<int>& seg_out) {
  LoraPool pool;
  pool.a = a;
  pool.b = b;
  pool.scale = scale;
  pool.n_slots = n_slots;
  pool.n_in = n_in;
  pool.max_rank = max_rank;
  pool.n_seg = int(seg_out.size());
  for (int m = 0; m < pool.n_seg; ++m) pool.seg_end[m] = pool.n_out += seg_out[size_t(m)];
  return pool;
}

}  // namespace servelab::kernels::testing
