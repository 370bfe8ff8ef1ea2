// RankPool (engine/backend/cuda/tp_rank_pool.h), the tensor-parallel backend's host threads: every
// task runs once on every rank a call, with blocking and with spinning hand-offs (the spin ending
// in the condition variable when no call comes in time), and a call reports the lowest rank's own
// failure before a rank that only gave up because another failed. Host threads only, no GPU.
#include <atomic>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/tp_rank_pool.h"

namespace servelab {
namespace tp_rank_pool_test {  // named, not anonymous: a unity batch shares one translation unit

// spin_us 0: every hand-off through the condition variables; 1: the spin ends at once, so a thread
// sleeps between most calls; 100000: the threads are always spinning when a call comes.
class RankPoolHandOff : public ::testing::TestWithParam<int> {};

TEST_P(RankPoolHandOff, EveryRankRunsEveryCallOnce) {
  cuda::RankPool pool(3, GetParam());
  std::vector<std::atomic<int>> runs(3);
  std::atomic<int> wrong_call{0};
  for (int call = 0; call < 300; ++call) {
    const std::function<void(int)> task = [&](int r) {
      if (runs[r].fetch_add(1) != call) wrong_call.fetch_add(1);
    };
    pool.run(task, 60.0);
    // run() returns only after every rank finished this call
    for (int r = 0; r < 3; ++r) ASSERT_EQ(runs[r].load(), call + 1) << "rank " << r << " call " << call;
  }
  EXPECT_EQ(wrong_call.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Spin, RankPoolHandOff, ::testing::Values(0, 1, 100000));

TEST(RankPool, TheLowestRanksOwnFailureWins) {
  for (int spin : {0, 100000}) {
    cuda::RankPool pool(3, spin);
    const std::function<void(int)> task = [](int r) {
      if (r == 0) throw cuda::TpPeerFailed("rank 0 gave up: another rank failed");
      if (r == 1) throw std::runtime_error("rank 1 broke");
      throw std::runtime_error("rank 2 broke");
    };
    try {
      pool.run(task, 60.0);
      FAIL() << "no error";
    } catch (const cuda::TpPeerFailed&) {
      FAIL() << "a consequence reported before the cause";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "rank 1 broke");
    }
    // the pool stays usable after a failed call
    std::atomic<int> ran{0};
    const std::function<void(int)> count = [&](int) { ran.fetch_add(1); };
    pool.run(count, 60.0);
    EXPECT_EQ(ran.load(), 3);
  }
}

TEST(RankPool, OnlyConsequencesReportTheFirstOfThem) {
  cuda::RankPool pool(2, 0);
  const std::function<void(int)> task = [](int r) {
    throw cuda::TpPeerFailed("rank " + std::to_string(r) + " gave up");
  };
  try {
    pool.run(task);
    FAIL() << "no error";
  } catch (const cuda::TpPeerFailed& e) {
    EXPECT_EQ(std::string(e.what()), "rank 0 gave up");
  }
}

}  // namespace tp_rank_pool_test
}  // namespace servelab
