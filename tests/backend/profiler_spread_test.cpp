// ProfileOptions::spread_decodes: each decode batch also timed with its contexts spread evenly over
// [c/2, 3c/2], what the sim prices mixed-length batches from (ProfiledStepModel's a_spread).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "engine/backend/profile_spread.h"
#include "engine/backend/profiler.h"

namespace servelab {
namespace {

ProfileOptions spread_options() {
  ProfileOptions o;
  o.prefill_lens = {4};
  o.batch_sizes = {1, 2, 5};
  o.contexts = {8, 40};
  o.prompt_lens = {4};
  o.chunk_lens = {4};
  o.padded_decodes = false;
  return o;
}

std::vector<ProfilePoint> decodes(const ProfileOptions& o) {
  std::vector<ProfilePoint> out;
  for (const ProfilePoint& p : profile_grid(o))
    if (p.phase == ProfilePhase::decode) out.push_back(p);
  return out;
}

TEST(ProfilerPlan, SpreadDecodesTwinEachBatchOfTwoOrMoreAroundItsContext) {
  ProfileOptions o = spread_options();
  const size_t plain = decodes(o).size();
  EXPECT_EQ(plain, 6u);  // 3 batches x 2 contexts, every sequence at the context
  o.spread_decodes = true;
  o.extra_decode_batches = {4};
  const std::vector<ProfilePoint> all = decodes(o);
  // 4 batches x 2 contexts plain, and twins of the 3 batches of >= 2 sequences x 2 contexts.
  ASSERT_EQ(all.size(), 8u + 6u);
  int twins = 0;
  for (const ProfilePoint& p : all) {
    const auto [lo, hi] = std::minmax_element(p.seqs.begin(), p.seqs.end(),
                                              [](const auto& a, const auto& b) { return a.context < b.context; });
    if (lo->context == hi->context) continue;
    ++twins;
    // Evenly from c/2 to 3c/2: the mean is c (within the integer steps), the longest 3c/2.
    int64_t sum = 0;
    for (const ProfilePoint::Seq& s : p.seqs) sum += s.context;
    const int c = hi->context == 12 ? 8 : 40;
    EXPECT_EQ(lo->context, c / 2);
    EXPECT_EQ(hi->context, c / 2 + c);
    EXPECT_NEAR(double(sum) / double(p.seqs.size()), double(c), 0.5 + 1e-9);
    EXPECT_GE(p.seqs.size(), 2u);
  }
  EXPECT_EQ(twins, 6);
  // Capped by max_len: no sequence passes it (its one new row included).
  o.max_len = 50;
  for (const ProfilePoint& p : decodes(o)) EXPECT_LE(p.max_len(), 50);
}

TEST(ProfilerPlan, ExponentialSpreadKeepsTheMeanAndStretchesTheTail) {
  for (int b : {2, 5, 16, 128}) {
    const std::vector<int> ctx = spread_contexts(900, b, SpreadShape::exponential);
    ASSERT_EQ(ctx.size(), size_t(b));
    EXPECT_TRUE(std::is_sorted(ctx.begin(), ctx.end()));
    int64_t sum = 0;
    for (int c : ctx) {
      EXPECT_GE(c, 1);
      sum += c;
    }
    EXPECT_NEAR(double(sum) / b, 900.0, 0.5) << b;  // each rounded to the nearest token
    // The quantiles' largest over their mean: ~ln 2b at many sequences (5.5 at 128), longer than
    // the even shape's 1.5 from 5 sequences on.
    const double top = double(ctx.back()) / 900.0;
    if (b >= 5) EXPECT_GT(top, 2.0) << b;
    if (b == 128) EXPECT_NEAR(top, std::log(2.0 * b) + 0.0, 0.6);
  }
  // The even shape: c/2 ... 3c/2.
  const std::vector<int> even = spread_contexts(40, 5, SpreadShape::even);
  EXPECT_EQ(even.front(), 20);
  EXPECT_EQ(even.back(), 60);
  EXPECT_THROW(spread_contexts(40, 1, SpreadShape::even), std::invalid_argument);
  EXPECT_EQ(parse_spread_shape("exponential"), SpreadShape::exponential);
  EXPECT_THROW(parse_spread_shape("gamma"), std::invalid_argument);
  // Through the grid: the exponential twins replace the even ones, the plain points unchanged.
  ProfileOptions o = spread_options();
  o.spread_decodes = true;
  o.spread_shape = SpreadShape::exponential;
  int twins = 0;
  for (const ProfilePoint& p : decodes(o)) {
    const auto [lo, hi] = std::minmax_element(p.seqs.begin(), p.seqs.end(),
                                              [](const auto& a, const auto& b) { return a.context < b.context; });
    twins += lo->context != hi->context;
  }
  EXPECT_EQ(twins, 4);  // batches 2 and 5 x contexts 8 and 40
}

}  // namespace
}  // namespace servelab
