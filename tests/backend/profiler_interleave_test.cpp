// ProfileOptions::interleave and its lead-ins: the grid timed in shuffled rounds, optionally after
// untimed decodes (lead_in) or after an untimed twin of each non-decode point (lead_in_self).
#include <algorithm>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/profiler.h"
#include "tests/backend/backend_test_util.h"
#include "tests/backend/profiler_test_util.h"

namespace servelab {
namespace profiler_interleave_test {  // named: a unity batch shares one translation unit

using profiler_testing::CountingBackend;
using profiler_testing::small_options;

TEST(Profiler, InterleaveTimesEveryPointInShuffledRounds) {
  CpuBackend cpu(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  CountingBackend b(cpu);
  ProfileOptions o = small_options();
  o.repeats = 3;
  o.warmup = 1;
  o.interleave = true;
  const ProfileReport r = profile_backend(b, o);
  const size_t n = profile_grid(o).size();
  ASSERT_EQ(r.samples.size(), n);
  EXPECT_EQ(b.shapes.size(), 1 + (1 + 3) * n);  // the first-touch step, a warm-up round, 3 timed rounds
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(r.samples[i].times_s.size(), 3u);
    std::vector<double> t = r.samples[i].times_s;
    std::sort(t.begin(), t.end());
    EXPECT_EQ(r.samples[i].step_s, t[1]);
  }
  // Each timed round is a permutation of the grid, and not the grid's order.
  const std::vector<int64_t> warm(b.shapes.begin() + 1, b.shapes.begin() + 1 + n);
  for (int round = 0; round < 3; ++round) {
    const auto first = b.shapes.begin() + 1 + (1 + round) * n;
    std::vector<int64_t> got(first, first + n), want = warm;
    EXPECT_NE(got, warm) << "round " << round;
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want) << "round " << round;
  }
  EXPECT_EQ(nlohmann::json::parse(profile_json(r)).at("options").at("interleave"), true);
  // Without it, each point's runs are back to back.
  b.shapes.clear();
  o.interleave = false;
  o.min_point_s = 1e9;
  profile_backend(b, o);
  ASSERT_EQ(b.shapes.size(), 1 + 4 * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 1; k < 4; ++k) EXPECT_EQ(b.shapes[1 + 4 * i + k], b.shapes[1 + 4 * i]);
}

TEST(Profiler, LeadInRunsDecodesBeforeEachTimedStep) {
  CpuBackend cpu(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  CountingBackend b(cpu);
  ProfileOptions o = small_options();
  o.repeats = 2;
  o.interleave = true;
  o.lead_in = 2;
  const ProfileReport r = profile_backend(b, o);
  const size_t n = profile_grid(o).size();
  ASSERT_EQ(r.samples.size(), n);
  ASSERT_EQ(b.shapes.size(), 1 + 2 * n * 3);  // the first-touch step, then per timed step 2 lead-in decodes
  // The lead-in is the decode of the middle batch (3 of {1, 3}) at the middle context (12 of {6, 12}).
  for (size_t k = 0; k < 2 * n; ++k) {
    EXPECT_EQ(b.shapes[1 + 3 * k], b.shapes[2 + 3 * k]);  // two lead-in steps of the same shape ...
    EXPECT_EQ(b.shapes[1 + 3 * k], 3 * 100000 + 3 * 13) << k;  // ... 3 rows at context 12 (+1)
  }
  EXPECT_EQ(nlohmann::json::parse(profile_json(r)).at("options").at("lead_in"), 2);
  o.interleave = false;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

// lead_in_self: every point that is not a decode runs once untimed right before its timed run (a
// step timed after its own kind); decodes are timed as before. Needs interleave.
TEST(Profiler, LeadInSelfRunsEachHeavyPointBeforeItsTimedRun) {
  CpuBackend cpu(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  CountingBackend b(cpu);
  ProfileOptions o = small_options();
  o.repeats = 1;
  o.warmup = 0;
  o.interleave = true;
  o.lead_in_self = true;
  const ProfileReport r = profile_backend(b, o);
  const std::vector<ProfilePoint> grid = profile_grid(o);
  ASSERT_EQ(r.samples.size(), grid.size());
  size_t heavy = 0;
  for (const ProfilePoint& p : grid) heavy += p.phase != ProfilePhase::decode;
  ASSERT_GT(heavy, 0u);
  ASSERT_EQ(b.shapes.size(), 1 + grid.size() + heavy);  // the first-touch step, each point once, twins
  size_t twins = 0;
  for (size_t k = 2; k < b.shapes.size(); ++k) twins += b.shapes[k] == b.shapes[k - 1];
  EXPECT_GE(twins, heavy);
  EXPECT_EQ(nlohmann::json::parse(profile_json(r)).at("options").at("lead_in_self"), true);
  o.interleave = false;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

}  // namespace profiler_interleave_test
}  // namespace servelab
