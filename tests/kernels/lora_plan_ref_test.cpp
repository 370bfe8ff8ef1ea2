// kernels/ref/lora_ref.h's plan (the grouping kernels/lora_sgmv.h's lora_plan computes on the
// device): rows by slot, cut into tiles of at most tile_rows rows, rows without an adapter out.
#include <gtest/gtest.h>

#include <vector>

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

}  // namespace
}  // namespace servelab::kernels
