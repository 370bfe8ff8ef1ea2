// PassSet: the scheduler's per-pass set of sequences (engine/sched/pass_set.h).
#include <gtest/gtest.h>

#include <vector>

#include "engine/sched/pass_set.h"

namespace servelab {
namespace {

TEST(PassSet, InsertsFindsErasesAndEmptiesInOneStep) {
  std::vector<int> items(1000);
  PassSet<int> set;
  EXPECT_FALSE(set.contains(&items[0]));
  EXPECT_FALSE(set.erase(&items[0]));
  for (int pass = 0; pass < 3; ++pass) {
    set.clear();
    for (size_t i = 0; i < items.size(); i += 2) EXPECT_TRUE(set.insert(&items[i]));  // grows past 64
    EXPECT_FALSE(set.insert(&items[0]));  // already there
    for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(set.contains(&items[i]), i % 2 == 0) << i;
    for (size_t i = 0; i < items.size(); i += 4) EXPECT_TRUE(set.erase(&items[i]));
    EXPECT_FALSE(set.erase(&items[0]));  // gone already
    for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(set.contains(&items[i]), i % 4 == 2) << i;
    EXPECT_TRUE(set.insert(&items[0]));  // back after an erase
    EXPECT_TRUE(set.contains(&items[0]));
  }
  set.clear();
  for (const int& x : items) EXPECT_FALSE(set.contains(&x));
}

}  // namespace
}  // namespace servelab
