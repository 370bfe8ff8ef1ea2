// The all-reduce reference (kernels/ref/allreduce_ref.h): a float sum in rank order with one
// rounding; with negative_zero_as_positive (the lamport variant's rule) an input -0.0 counts as
// +0.0, which only changes a sum made of negative zeros.
#include <gtest/gtest.h>

#include "kernels/ref/allreduce_ref.h"

namespace servelab::kernels::ref {
namespace {

TEST(AllReduceRef, SumsInFloatAndNegativeZerosAsTheVariantSays) {
  const uint16_t neg0 = 0x8000, pos0 = 0, one = float_to_bf16(1.0f), two = float_to_bf16(2.0f);
  const std::vector<std::vector<uint16_t>> ins = {{neg0, neg0, one, neg0}, {neg0, pos0, one, two}};
  EXPECT_EQ(all_reduce_sum_bf16(ins), (std::vector<uint16_t>{neg0, pos0, two, two}));
  EXPECT_EQ(all_reduce_sum_bf16(ins, /*negative_zero_as_positive=*/true), (std::vector<uint16_t>{pos0, pos0, two, two}));
  // 1 + 2^-8 + 2^-8 summed in float is 1 + 2^-7 (a bf16); rounding to bf16 after each add would
  // give 1.0 (1 + 2^-8 is a tie, rounded to even).
  const uint16_t eps = float_to_bf16(1.0f / 256);
  EXPECT_EQ(bf16_to_float(all_reduce_sum_bf16({{one}, {eps}, {eps}})[0]), 1.0f + 1.0f / 128);
}

}  // namespace
}  // namespace servelab::kernels::ref
