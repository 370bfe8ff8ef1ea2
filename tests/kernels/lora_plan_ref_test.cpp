// kernels/ref/lora_ref.h's plan (the grouping kernels/lora_sgmv.h's lora_plan computes on the
// device): rows by slot, cut into tiles of at most tile_rows rows, rows without an adapter out.
// And kernels/lora_runs.h: the runs of rows of one adapter an eager step gives the tensor cores.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/lora_runs.h"
#include "kernels/ref/lora_ref.h"

namespace servelab::kernels {
namespace {

TEST(LoraPlanRef, GroupsRowsBySlotIntoTiles) {
  // Slot 2 has 5 rows (tiles of 3: 3 + 2), slot 0 one row, slot 1 none; -1 and a slot past
  // n_slots (3) carry no adapter.
  const std::vector<int32_t> slot = {2, -1, 0, 2, 2, 3, 2, -1, 2};
  const LoraPlanRef p = lora_plan_ref(slot.data(), int(slot.size()), 3, 3);
  EXPECT_EQ(p.perm, (std::vector<int32_t>{2, 0, 3, 4, 6, 8}));
  EXPECT_EQ(p.tiles, (std::vector<int32_t>{0, 0, 1, 2, 1, 3, 2, 4, 2}));
  EXPECT_EQ(p.n_tiles(), 3);
  const std::vector<int32_t> none = {-1, -1};
  EXPECT_EQ(lora_plan_ref(none.data(), 2, 3, 3).n_tiles(), 0);
}

TEST(LoraSiluMulRef, AddsTheDeltaOnlyToRowsWithAnAdapter) {
  // ffn 2: gate_up rows [g0, g1, u0, u1]; row 0 has an adapter, row 1 none (its delta unread).
  const std::vector<float> gate_up = {1.0f, -2.0f, 3.0f, 0.5f, 0.0f, 2.0f, 4.0f, -1.0f};
  const std::vector<float> delta = {1.0f, 2.0f, -1.0f, 0.5f, 100.0f, 100.0f, 100.0f, 100.0f};
  const std::vector<int32_t> slot = {3, -1};
  std::vector<float> act(4);
  lora_silu_mul_ref(gate_up.data(), delta.data(), slot.data(), 2, 2, act.data());
  auto silu = [](double g) { return g / (1.0 + std::exp(-g)); };
  EXPECT_NEAR(act[0], silu(2.0) * 2.0, 1e-6);  // (1 + 1), (3 - 1)
  EXPECT_NEAR(act[1], silu(0.0) * 1.0, 1e-6);  // (-2 + 2), (0.5 + 0.5)
  EXPECT_NEAR(act[2], silu(0.0) * 4.0, 1e-6);
  EXPECT_NEAR(act[3], silu(2.0) * -1.0, 1e-6);
}

TEST(LoraRuns, PicksLongRunsAndLeavesTheOtherRows) {
  // Runs: slot 1 x3, slot 0 x1, slot 0 x2 after a row without an adapter, slot 2 x4, slot 1 x1.
  const std::vector<int32_t> slot = {1, 1, 1, 0, -1, 0, 0, 2, 2, 2, 2, 1};
  const int n = int(slot.size());
  EXPECT_EQ(lora_runs(slot.data(), n),
            (std::vector<LoraRun>{{1, 0, 3}, {0, 3, 1}, {0, 5, 2}, {2, 7, 4}, {1, 11, 1}}));
  // At least 2 rows: three runs; at most 2 of them: the longest two, in row order.
  EXPECT_EQ(lora_gemm_runs(slot.data(), n, 2, 8), (std::vector<LoraRun>{{1, 0, 3}, {0, 5, 2}, {2, 7, 4}}));
  EXPECT_EQ(lora_gemm_runs(slot.data(), n, 2, 2), (std::vector<LoraRun>{{1, 0, 3}, {2, 7, 4}}));
  EXPECT_TRUE(lora_gemm_runs(slot.data(), n, 0, 8).empty());  // off
  EXPECT_TRUE(lora_gemm_runs(slot.data(), n, 5, 8).empty());  // none long enough
  std::vector<int32_t> left;
  EXPECT_TRUE(lora_rows_left(slot.data(), n, lora_gemm_runs(slot.data(), n, 2, 2), left));
  EXPECT_EQ(left, (std::vector<int32_t>{-1, -1, -1, 0, -1, 0, 0, -1, -1, -1, -1, 1}));
  EXPECT_FALSE(lora_rows_left(slot.data(), n, lora_gemm_runs(slot.data(), n, 1, 8), left));
  EXPECT_EQ(left, std::vector<int32_t>(slot.size(), -1));
}

TEST(LoraFusedTiles, CutsRunsIntoTilesAndCoversTheRowsBetween) {
  const float scale[3] = {0.5f, 1.5f, 2.5f};
  LoraFusedTiles t;
  // 10 rows without an adapter, a run of 300 on slot 2 (128 + 128 + 44), 3 rows, a run of 5 on slot 0, 7 rows.
  ASSERT_TRUE(lora_fused_tiles({{2, 10, 300}, {0, 313, 5}}, 325, scale, t));
  ASSERT_EQ(t.n, 7);
  const int32_t want[7][3] = {{0, 10, -1}, {10, 128, 2}, {138, 128, 2}, {266, 44, 2}, {310, 3, -1}, {313, 5, 0}, {318, 7, -1}};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(t.tile[i].row0, want[i][0]) << i;
    EXPECT_EQ(t.tile[i].rows, want[i][1]) << i;
    EXPECT_EQ(t.tile[i].slot, want[i][2]) << i;
  }
  EXPECT_EQ(t.tile[1].scale, 2.5f);
  EXPECT_EQ(t.tile[5].scale, 0.5f);
  EXPECT_EQ(t.tile[0].scale, 0.f);
  // No runs: the product alone in tiles of 128.
  ASSERT_TRUE(lora_fused_tiles({}, 129, scale, t));
  EXPECT_EQ(t.n, 2);
  EXPECT_EQ(t.tile[1].rows, 1);
  // More than kLoraFusedMaxTiles tiles: refused.
  EXPECT_FALSE(lora_fused_tiles({{1, 0, kLoraFusedTileRows * kLoraFusedMaxTiles + 1}}, kLoraFusedTileRows * kLoraFusedMaxTiles + 1, scale, t));
  std::vector<LoraRun> many;
  for (int i = 0; i < kLoraFusedMaxTiles; ++i) many.push_back({0, 2 * i + 1, 1});  // runs with gaps: 2 tiles each
  EXPECT_FALSE(lora_fused_tiles(many, 2 * kLoraFusedMaxTiles + 1, scale, t));
}

}  // namespace
}  // namespace servelab::kernels
