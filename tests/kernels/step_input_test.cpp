#include <gtest/gtest.h>

#include "engine/backend/step_input.h"
#include "kernels/step_input.h"
#include "tests/kernels/kv_fixture.h"

namespace servelab::kernels {
namespace {

TEST(StepInput, SlotAddressingForBothLayouts) {
  StepInput in;
  in.kv_kind = KvLayoutKind::paged;
  in.block_size = 4;
  in.block_table_stride = 2;
  in.block_tables = {7, 2, 5, 0};
  EXPECT_EQ(in.addressing().slot(0, 0), 28);
  EXPECT_EQ(in.addressing().slot(0, 5), 9);
  EXPECT_EQ(in.addressing().slot(1, 3), 23);
  in.kv_kind = KvLayoutKind::naive;
  in.base_slots = {100, 40};
  EXPECT_EQ(in.addressing().slot(1, 3), 43);
}

TEST(StepInput, ValidateNamesTheBadField) {
  std::mt19937_64 rng(1);
  testing::KvBatch b = testing::make_batch({{5, 9}, {1, 4}, 4, 2, 8, KvLayoutKind::paged, 4}, rng);
  EXPECT_NO_THROW(b.in.validate());
  StepInput bad = b.in;
  bad.decode_only = true;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = b.in;
  bad.context_lens[1] = 3;  // fewer than its 4 query rows
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = b.in;
  bad.block_table_stride = 1;
  try {
    bad.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("block_table"), std::string::npos) << e.what();
  }
  bad = b.in;
  bad.sample_rows = {0};
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace servelab::kernels
