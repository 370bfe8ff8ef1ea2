#include "engine/kv/prefix_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>

namespace servelab {
namespace {

// Hashes sharing their low bits land in one probe run; the table's capacity for 8 entries is 16,
// so these all start at home slot 3 (or 15, next to the wrap).
constexpr uint64_t home_three(uint64_t k) { return (k << 8) | 3u; }

TEST(PrefixIndex, FindsWhatWasInsertedAndKeepsTheFirstOfAHash) {
  PrefixIndex idx(8);
  EXPECT_EQ(idx.find(42), PrefixIndex::kAbsent);
  idx.insert_if_absent(42, 7);
  idx.insert_if_absent(42, 9);  // same content cached twice: the first block stays
  EXPECT_EQ(idx.find(42), 7);
  EXPECT_EQ(idx.size(), 1u);
  idx.erase_if(42, 9);  // 9 never owned the hash: nothing happens
  EXPECT_EQ(idx.find(42), 7);
  idx.erase_if(42, 7);
  EXPECT_EQ(idx.find(42), PrefixIndex::kAbsent);
  EXPECT_EQ(idx.size(), 0u);
}

TEST(PrefixIndex, ErasingFromTheMiddleOfAProbeRunKeepsTheRestFindable) {
  PrefixIndex idx(8);
  for (int k = 0; k < 5; ++k) idx.insert_if_absent(home_three(k + 1), k);
  idx.erase_if(home_three(2), 1);  // the second of the run
  for (int k = 0; k < 5; ++k) EXPECT_EQ(idx.find(home_three(k + 1)), k == 1 ? PrefixIndex::kAbsent : k) << k;
  idx.erase_if(home_three(1), 0);  // the head
  for (int k = 2; k < 5; ++k) EXPECT_EQ(idx.find(home_three(k + 1)), k) << k;
  EXPECT_EQ(idx.size(), 3u);
}

TEST(PrefixIndex, ProbeRunsThatWrapAroundTheTableSurviveErasure) {
  PrefixIndex idx(8);  // 16 slots: home 15 wraps to 0, 1, ...
  const auto home15 = [](uint64_t k) { return (k << 8) | 15u; };
  for (int k = 0; k < 4; ++k) idx.insert_if_absent(home15(k + 1), 10 + k);
  idx.insert_if_absent(home_three(1), 99);
  idx.erase_if(home15(1), 10);  // in slot 15: the wrapped entries must move back across the end
  for (int k = 1; k < 4; ++k) EXPECT_EQ(idx.find(home15(k + 1)), 10 + k) << k;
  EXPECT_EQ(idx.find(home_three(1)), 99);
}

TEST(PrefixIndex, MatchesAnOrderedMapUnderRandomInsertsAndErases) {
  // Against std::map as the reference, with few distinct low bits so probe runs are long.
  std::mt19937_64 rng(7);
  PrefixIndex idx(64);
  std::map<uint64_t, int32_t> ref;
  for (int step = 0; step < 20000; ++step) {
    const uint64_t h = (rng() % 40) << 20 | (rng() % 6);
    const auto block = static_cast<int32_t>(rng() % 64);
    if (rng() % 2 == 0 && ref.size() < 64) {
      idx.insert_if_absent(h, block);
      ref.try_emplace(h, block);
    } else {
      idx.erase_if(h, block);
      if (auto it = ref.find(h); it != ref.end() && it->second == block) ref.erase(it);
    }
    ASSERT_EQ(idx.size(), ref.size()) << "step " << step;
  }
  for (const auto& [h, b] : ref) EXPECT_EQ(idx.find(h), b);
  size_t seen = 0;
  idx.for_each([&](uint64_t h, int32_t b) {
    ++seen;
    EXPECT_EQ(ref.at(h), b);
  });
  EXPECT_EQ(seen, ref.size());
}

}  // namespace
}  // namespace servelab
