#include <atomic>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/thread_pool.h"

namespace servelab {
namespace {

TEST(ThreadPool, CoversEveryItemOnceWithValidWorkerIndices) {
  for (int n_threads : {1, 2, 4}) {
    ThreadPool pool(n_threads);
    for (int round = 0; round < 20; ++round) {  // reuse across jobs
      std::vector<std::atomic<int>> hits(1000 + round);
      std::atomic<bool> bad_worker{false};
      pool.parallel_for(static_cast<int64_t>(hits.size()), 7, [&](int worker, int64_t b, int64_t e) {
        if (worker < 0 || worker >= n_threads) bad_worker = true;
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      EXPECT_FALSE(bad_worker);
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, RethrowsTheBodysExceptionAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](int, int64_t b, int64_t) {
                                   if (b == 50) throw std::runtime_error("item 50");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, 3, [&](int, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
  EXPECT_THROW(ThreadPool(0), std::invalid_argument);
}

TEST(ThreadPool, ManyShortJobsBackToBackWithAndWithoutSpinning) {
  // Workers join late or not at all when the caller finishes a small job first; each job must
  // still run every item once and never touch the previous job's body.
  for (int spin_us : {0, 50}) {
    ThreadPool pool(3, spin_us);
    for (int job = 0; job < 2000; ++job) {
      std::vector<int> hits(3 + job % 5, 0);
      std::atomic<int> total{0};
      pool.parallel_for(static_cast<int64_t>(hits.size()), 1, [&](int, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          ++hits[i];  // one writer per item
          total.fetch_add(1);
        }
      });
      ASSERT_EQ(total.load(), static_cast<int>(hits.size())) << "job " << job;
      for (int h : hits) ASSERT_EQ(h, 1) << "job " << job;
    }
  }
}

}  // namespace
}  // namespace servelab
