#pragma once
// The FP8 KV cache's prefill scratch in the memory budget (kernels/kv_fp8.h, cuda_ops.h Attention):
// a prefill, mixed or verification step dequantizes every cached position of its sequences into a
// dtype scratch, K and V, one layer at a time. A step reads at most one position per arena slot
// when no prefix is shared between its sequences, and at most max_seqs × max_position positions,
// so `gpu_memory_utilization`'s budget holds the arena and a scratch of min(slots, that cap)
// positions (split_kv8_budget); the scratch then grows to what a step needs, by half again but not
// past the arena's slot count unless a step needs more (kv8_scratch_grow_to: only steps over
// shared prefixes can, and then it takes memory beyond the budget). Plain C++: tested on the CPU
// (tests/cuda_backend/kv_fp8_scratch_test.cpp).
#include <algorithm>
#include <cstdint>

namespace servelab::cuda {

/// Scratch bytes a position takes: its K and V rows of kv_dim elements of elem_bytes.
constexpr int64_t kv8_scratch_bytes_per_position(int64_t kv_dim, int64_t elem_bytes) { return 2 * kv_dim * elem_bytes; }

struct Kv8Budget {
  int64_t kv_bytes = 0;           ///< the arena: slots × slot_bytes
  int64_t slots = 0;
  int64_t scratch_positions = 0;  ///< min(slots, position_cap)
  int64_t scratch_bytes = 0;      ///< scratch_positions × scratch_per_position
};

/// The most whole slots whose arena plus a scratch of min(slots, position_cap) positions fits
/// `budget` bytes (all zero when not one slot does).
inline Kv8Budget split_kv8_budget(int64_t budget, int64_t slot_bytes, int64_t scratch_per_position, int64_t position_cap) {
  Kv8Budget b;
  if (budget <= 0 || slot_bytes <= 0 || scratch_per_position < 0 || position_cap < 1) return b;
  int64_t slots = budget / (slot_bytes + scratch_per_position);
  // Past the cap the scratch stops growing: the rest of the budget is arena.
  if (slots >= position_cap) slots = (budget - position_cap * scratch_per_position) / slot_bytes;
  b.slots = slots;
  b.kv_bytes = slots * slot_bytes;
  b.scratch_positions = std::min(slots, position_cap);
  b.scratch_bytes = b.scratch_positions * scratch_per_position;
  return b;
}

/// Positions the scratch holds after a step that needs `need` of them, holding `have` now, with an
/// arena of `cap` slots (0: no cap): unchanged when it suffices, else max(need, min(1.5 × have, cap)).
constexpr int64_t kv8_scratch_grow_to(int64_t need, int64_t have, int64_t cap) {
  if (need <= have) return have;
  const int64_t grown = cap > 0 ? std::min(have * 3 / 2, cap) : have * 3 / 2;
  return std::max(need, grown);
}

}  // namespace servelab::cuda
