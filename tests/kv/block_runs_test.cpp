// BlockRuns' shortcuts must hand out what the general path does: take_run (a run just evicted
// from the prefix cache, taken from at once) against add_range then take, can_serve against
// take's answer, and the reservations' hash table (OwnerRuns) against std::map, over seeded
// random operations.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/block_runs.h"
#include "engine/kv/owner_runs.h"

namespace servelab {
namespace {

TEST(OwnerRuns, FindsInsertsAndErasesAsAMapThroughGrowthAndProbeRuns) {
  std::mt19937_64 rng(7);
  OwnerRuns table;
  std::map<uint64_t, BlockRun> ref;
  for (int op = 0; op < 4000; ++op) {
    // Sequential ids as the engine's, and a few far apart: 300 owners make the table grow to 1024.
    const uint64_t owner = rng() % 4 == 0 ? rng() : rng() % 300;
    const auto b = static_cast<int32_t>(rng() % 1000);
    if (ref.contains(owner)) {
      if (rng() % 2) {
        table.erase(owner);
        ref.erase(owner);
      } else {
        *table.find(owner) = ref[owner] = BlockRun{b, b + 3};
      }
    } else {
      table.insert(owner, BlockRun{b, b + 1});
      ref[owner] = BlockRun{b, b + 1};
    }
    ASSERT_EQ(table.size(), ref.size());
  }
  for (uint64_t owner = 0; owner < 300; ++owner) {
    const BlockRun* got = table.find(owner);
    ASSERT_EQ(got != nullptr, ref.contains(owner)) << owner;
    if (got) {
      EXPECT_EQ(got->begin, ref[owner].begin) << owner;
    }
  }
  size_t n = 0;
  table.for_each([&](uint64_t owner, const BlockRun& run) {
    ++n;
    EXPECT_EQ(run.end, ref.at(owner).end) << owner;
  });
  EXPECT_EQ(n, ref.size());
  table.erase(123456789);  // absent: nothing happens
  EXPECT_EQ(table.size(), ref.size());
}

/// Free blocks as check() marks them, and every owner's reservation: the runs' whole state.
std::string state_of(const BlockRuns& r, int32_t n_blocks, int n_owners) {
  std::string mark(static_cast<size_t>(n_blocks), 0);
  std::string out = r.check(std::span<char>(mark.data(), mark.size()));
  for (char& c : mark) c = c ? '1' : '0';
  out += mark;
  for (int o = 1; o <= n_owners; ++o) {
    out += ' ';
    out += std::to_string(r.reserved(static_cast<uint64_t>(o)));
  }
  return out;
}

TEST(BlockRuns, TakeRunHandsOutWhatAddRangeThenTakeDo) {
  constexpr int32_t kBlocks = 96;
  constexpr int kOwners = 6;
  std::mt19937_64 rng(11);
  BlockRuns fast(kBlocks), slow(kBlocks);
  fast.add_all();
  slow.add_all();
  std::vector<std::vector<int32_t>> held(kOwners + 1);
  std::set<int32_t> cached;  // blocks out of both runs: the prefix cache's, evicted as runs
  int n_fast_path = 0;
  for (int op = 0; op < 3000; ++op) {
    const auto o = static_cast<int>(1 + rng() % kOwners);
    auto& table = held[static_cast<size_t>(o)];
    const int32_t prev = table.empty() ? BlockRuns::kNone : table.back();
    const auto want = static_cast<int32_t>(1 + rng() % 8);
    const bool tail = rng() % 8 != 0;
    const int kind = static_cast<int>(rng() % 10);
    int32_t got = BlockRuns::kNone;
    if (kind < 4) {  // a block as take_fresh asks first
      const bool may_split = rng() % 2;
      const bool serves = fast.can_serve(o, tail, may_split);
      got = fast.take(o, prev, want, tail, may_split);
      ASSERT_EQ(got, slow.take(o, prev, want, tail, may_split)) << "op " << op;
      ASSERT_EQ(serves, got != BlockRuns::kNone) << "op " << op << ": can_serve is not take's answer";
    } else if (kind < 6 && !cached.empty()) {  // cached blocks evicted as one run: the lowest, or
      // those from the block after the owner's last (the owner's run goes on into it)
      const int32_t lo = prev != BlockRuns::kNone && cached.contains(prev + 1) ? prev + 1 : *cached.begin();
      int32_t hi = lo;
      while (hi - lo + 1 < want && cached.contains(hi + 1)) ++hi;
      for (int32_t b = lo; b <= hi; ++b) cached.erase(b);
      int32_t n_reserved = 0;  // every free block reserved: no extent, take_run's own path
      for (int r = 1; r <= kOwners; ++r) n_reserved += fast.reserved(static_cast<uint64_t>(r));
      n_fast_path += n_reserved == fast.size() && !(tail && fast.reserved(static_cast<uint64_t>(o)) > 0);
      got = fast.take_run(o, prev, lo, hi + 1, want, tail);
      slow.add_range(lo, hi + 1);
      ASSERT_EQ(got, slow.take(o, prev, want, tail, false)) << "op " << op;
    } else if (kind < 9 || table.empty()) {  // its reserved blocks, as append_fresh takes them
      const int32_t m = fast.take_reserved(o, prev, want);
      ASSERT_EQ(m, slow.take_reserved(o, prev, want));
      for (int32_t b = prev + 1; b <= prev + m; ++b) table.push_back(b);
    } else {  // the owner leaves: each block back to the runs or into the cache
      for (int32_t b : table) {
        if (rng() % 4) {
          cached.insert(b);
        } else {
          fast.add(b);
          slow.add(b);
        }
      }
      table.clear();
      fast.drop(o);
      slow.drop(o);
    }
    if (got != BlockRuns::kNone) table.push_back(got);
    ASSERT_EQ(state_of(fast, kBlocks, kOwners), state_of(slow, kBlocks, kOwners)) << "op " << op;
  }
  EXPECT_GT(n_fast_path, 0) << "no evicted run met runs without extents: the shortcut went untested";
}

}  // namespace
}  // namespace servelab
