// pack_step: the compact layout carries the plan's arrays unchanged; the bucket layout (CUDA graph
// decode steps) pads to B sequences with rows that write nothing and read block 0 / slot 0.
#include "engine/backend/cuda/step_pack.h"

#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace servelab::cuda {
namespace step_pack_test {  // named, not anonymous: a unity batch shares one translation unit

/// Two decode sequences, paged, block size 4, stride 3.
Step decode_plan() {
  Step p;
  kernels::StepInput& in = p.in;
  in.token_ids = {5, 6};
  in.positions = {9, 3};
  in.block_size = 4;
  in.block_table_stride = 3;
  in.block_tables = {7, 8, 9, 2, 0, 0};
  in.slot_mapping = {9 * 4 + 1, 2 * 4 + 3};
  in.query_start = {0, 1, 2};
  in.context_lens = {10, 4};
  in.sample_rows = {0, 1};
  in.temperature = {0.5f, 0.0f};
  in.top_k = {3, 0};
  in.top_p = {0.9f, 1.0f};
  in.seed = {11, 12};
  in.seq_key = {0, 1};
  in.sample_position = {10, 4};
  in.mask_index = {-1, -1};
  in.seq_ids = {1, 2};
  in.decode_only = true;
  return p;
}

template <typename T>
std::vector<T> read(const std::vector<uint8_t>& buf, size_t offset, int n) {
  const T* p = reinterpret_cast<const T*>(buf.data() + offset);
  return std::vector<T>(p, p + n);
}

TEST(StepPack, CompactLayoutCarriesThePlan) {
  Step p = decode_plan();
  p.n_padding = 1;
  const PackedLayout l = compact_layout(p);
  std::vector<uint8_t> buf(l.total, 0xAB);
  pack_step(p, l, buf.data());
  EXPECT_EQ(read<int32_t>(buf, l.token_ids, 3), (std::vector<int32_t>{5, 6, 0}));  // padding row reads token 0
  EXPECT_EQ(read<int64_t>(buf, l.slot_mapping, 2), p.in.slot_mapping);
  EXPECT_EQ(read<int32_t>(buf, l.block_tables, 6), p.in.block_tables);
  EXPECT_EQ(read<float>(buf, l.top_p, 2), p.in.top_p);
  EXPECT_EQ(read<uint64_t>(buf, l.seed, 2), p.in.seed);
  EXPECT_EQ(l.total % 16, 0u);
  for (size_t off : {l.positions, l.slot_mapping, l.block_tables, l.seed, l.sample_position}) EXPECT_EQ(off % 16, 0u);
}

TEST(StepPack, BucketLayoutPadsWithRowsThatWriteNothing) {
  const Step p = decode_plan();
  ASSERT_TRUE(bucketable(p));
  const PackedLayout l = bucket_layout(p, 4, 8);
  std::vector<uint8_t> buf(l.total, 0xAB);
  pack_step(p, l, buf.data());
  EXPECT_EQ(read<int32_t>(buf, l.token_ids, 4), (std::vector<int32_t>{5, 6, 0, 0}));
  EXPECT_EQ(read<int64_t>(buf, l.slot_mapping, 4), (std::vector<int64_t>{37, 11, -1, -1}));
  EXPECT_EQ(read<int32_t>(buf, l.query_start, 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(read<int32_t>(buf, l.context_lens, 4), (std::vector<int32_t>{10, 4, 1, 1}));
  const std::vector<int32_t> table = read<int32_t>(buf, l.block_tables, 32);
  EXPECT_EQ(std::vector<int32_t>(table.begin(), table.begin() + 3), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(std::vector<int32_t>(table.begin() + 8, table.begin() + 11), (std::vector<int32_t>{2, 0, 0}));
  EXPECT_EQ(std::vector<int32_t>(table.begin() + 16, table.end()), std::vector<int32_t>(16, 0));
  EXPECT_EQ(read<int32_t>(buf, l.sample_rows, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(read<float>(buf, l.temperature, 4), (std::vector<float>{0.5f, 0.0f, 0.0f, 0.0f}));
}

// A verification step in its one-row form carries its row spans (decode_attention_rows); padding
// sequences of a bucket are one row each.
TEST(StepPack, RowSpansTravelWithTheStepAndPadToOneRow) {
  const Step p = decode_plan();
  const std::vector<int32_t> spans = {1, 1};
  const PackedLayout l = bucket_layout(p, 4, 8, nullptr, &spans);
  ASSERT_TRUE(l.has_row_spans);
  std::vector<uint8_t> buf(l.total, 0xAB);
  pack_step(p, l, buf.data(), nullptr, &spans);
  EXPECT_EQ(read<int32_t>(buf, l.row_spans, 4), (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(l.row_spans % 16, 0u);
  EXPECT_FALSE(compact_layout(p).has_row_spans);
  const std::vector<int32_t> wrong = {1};
  EXPECT_THROW(pack_step(p, l, buf.data(), nullptr, &wrong), std::logic_error);
}

TEST(StepPack, OnlyPlainDecodeStepsAreBucketable) {
  Step p = decode_plan();
  p.n_padding = 1;
  EXPECT_FALSE(bucketable(p));
  p = decode_plan();
  p.in.sample_rows = {0, 0};  // parallel samples of one row
  EXPECT_FALSE(bucketable(p));
  p = decode_plan();
  p.in.decode_only = false;
  EXPECT_FALSE(bucketable(p));
  EXPECT_THROW(bucket_layout(decode_plan(), 1, 8), std::logic_error);
}

}  // namespace step_pack_test
}  // namespace servelab::cuda
