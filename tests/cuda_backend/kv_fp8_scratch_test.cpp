// The FP8 KV cache's prefill scratch in gpu_memory_utilization's budget (engine/backend/cuda/
// kv_fp8_scratch.h), without a GPU: the arena and a scratch of min(slots, cap) positions fit the
// budget, with no room left for another slot; the scratch grows by half again up to the arena's
// slot count, and past it only as far as a step needs.
#include <cstdint>
#include <random>

#include <gtest/gtest.h>

#include "engine/backend/cuda/kv_fp8_scratch.h"

namespace servelab::cuda {
namespace {

TEST(KvFp8Scratch, ArenaAndScratchFitTheBudgetWithNoRoomForAnotherSlot) {
  // llama2-7b with an FP8 KV cache: 270,336 bytes a slot, 16,384 of scratch a position (K and V
  // rows of 4096 bf16).
  const int64_t slot = 270336, per_pos = kv8_scratch_bytes_per_position(4096, 2);
  ASSERT_EQ(per_pos, 16384);
  const Kv8Budget b = split_kv8_budget(int64_t(100) << 30, slot, per_pos, int64_t(1) << 40);
  EXPECT_EQ(b.slots, (int64_t(100) << 30) / (slot + per_pos));  // the scratch takes ~5.7% of the budget
  EXPECT_EQ(b.scratch_positions, b.slots);
  EXPECT_EQ(b.kv_bytes, b.slots * slot);
  EXPECT_LE(b.kv_bytes + b.scratch_bytes, int64_t(100) << 30);
  EXPECT_GT((b.slots + 1) * (slot + per_pos), int64_t(100) << 30);
  // A cap under the slot count: the scratch stops there and the rest is arena.
  const Kv8Budget c = split_kv8_budget(int64_t(100) << 30, slot, per_pos, 4 * 4096);
  EXPECT_EQ(c.scratch_positions, 4 * 4096);
  EXPECT_EQ(c.slots, ((int64_t(100) << 30) - 4 * 4096 * per_pos) / slot);
  EXPECT_GT(c.slots, b.slots);
  // Nothing fits: all zero.
  const Kv8Budget z = split_kv8_budget(slot + per_pos - 1, slot, per_pos, 100);
  EXPECT_EQ(z.slots, 0);
  EXPECT_EQ(z.kv_bytes + z.scratch_bytes, 0);
  EXPECT_EQ(split_kv8_budget(-5, slot, per_pos, 100).slots, 0);
}

TEST(KvFp8Scratch, RandomBudgetsAlwaysFitAndLeaveLessThanASlot) {
  std::mt19937_64 rng(2026);
  std::uniform_int_distribution<int64_t> budget(1, int64_t(1) << 38), slot(16, 1 << 20), pos(0, 1 << 16), cap(1, 1 << 22);
  for (int i = 0; i < 2000; ++i) {
    const int64_t B = budget(rng), S = slot(rng), P = pos(rng), C = cap(rng);
    const Kv8Budget b = split_kv8_budget(B, S, P, C);
    ASSERT_LE(b.kv_bytes + b.scratch_bytes, B) << B << " " << S << " " << P << " " << C;
    ASSERT_EQ(b.scratch_positions, std::min(b.slots, C));
    // One more slot (and its scratch position, under the cap) would not fit.
    ASSERT_GT((b.slots + 1) * S + std::min(b.slots + 1, C) * P, B) << B << " " << S << " " << P << " " << C;
  }
}

TEST(KvFp8Scratch, GrowsByHalfUpToTheArenaThenOnlyAsFarAsAStepNeeds) {
  EXPECT_EQ(kv8_scratch_grow_to(100, 200, 1000), 200);   // enough already
  EXPECT_EQ(kv8_scratch_grow_to(250, 200, 1000), 300);   // half again
  EXPECT_EQ(kv8_scratch_grow_to(850, 800, 1000), 1000);  // half again, capped at the arena's slots
  EXPECT_EQ(kv8_scratch_grow_to(1300, 1000, 1000), 1300);  // shared prefixes: what the step needs
  EXPECT_EQ(kv8_scratch_grow_to(2000, 0, 1000), 2000);
  EXPECT_EQ(kv8_scratch_grow_to(250, 200, 0), 300);  // no arena yet: no cap
}

}  // namespace
}  // namespace servelab::cuda
