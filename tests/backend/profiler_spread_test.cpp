// ProfileOptions::spread_decodes: each decode batch also timed with its contexts spread evenly over
// [c/2, 3c/2], what the sim prices mixed-length batches from (ProfiledStepModel's a_spread).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

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

}  // namespace
}  // namespace servelab
