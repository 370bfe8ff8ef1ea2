// SwapSpace: the host swap pool's block bookkeeping, and the swap runs it builds against the
// real KV managers (paged blocks of any size, naive regions).
#include "engine/kv/swap_space.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "engine/kv/naive_kv.h"
#include "engine/kv/paged_kv.h"
#include "tests/kv/kv_test_util.h"

namespace servelab {
namespace {

using kvtest::make_seq;

/// Every position's arena slot and host slot, expanded from the runs.
void expect_runs_cover(const std::vector<KvSwap>& runs, const Sequence& seq, const KvManager& kv, const SwapSpace& sp,
                       int begin, int end) {
  int p = begin;
  for (const KvSwap& r : runs) {
    ASSERT_GT(r.n_slots, 0);
    for (int64_t i = 0; i < r.n_slots; ++i, ++p) {
      EXPECT_EQ(r.device_slot + i, kv.slot(seq, p)) << "position " << p;
      const int bs = sp.block_slots();
      EXPECT_EQ(r.host_slot + i, int64_t{seq.swap_blocks[p / bs]} * bs + p % bs) << "position " << p;
    }
  }
  EXPECT_EQ(p, end);
}

TEST(SwapSpace, LowestBlocksFirstWholeBlocksAndRelease) {
  SwapSpace sp(100, 16);  // 6 whole blocks; the 4-slot tail is not used
  EXPECT_EQ(sp.capacity_slots(), 96);
  EXPECT_EQ(sp.free_slots(), 96);
  Sequence a = make_seq(1, kvtest::iota_tokens(40), 8), b = make_seq(2, kvtest::iota_tokens(20), 8);
  EXPECT_TRUE(sp.can_hold(96));
  EXPECT_FALSE(sp.can_hold(97));
  sp.allocate(a, 33);  // 3 blocks
  EXPECT_EQ(a.swap_blocks, (std::vector<int32_t>{0, 1, 2}));
  sp.allocate(b, 16);
  EXPECT_EQ(b.swap_blocks, (std::vector<int32_t>{3}));
  EXPECT_THROW(sp.allocate(b, 1), std::logic_error) << "already holds blocks";
  EXPECT_EQ(sp.free_slots(), 32);
  EXPECT_FALSE(sp.can_hold(33));
  Sequence c = make_seq(3, kvtest::iota_tokens(40), 8);
  EXPECT_THROW(sp.allocate(c, 40), std::logic_error) << "does not fit";
  sp.check_invariants({&a, &b});
  EXPECT_THROW(sp.check_invariants({&a}), std::logic_error) << "b's block counted as neither free nor held";
  sp.release(a);
  sp.release(a);  // idempotent
  EXPECT_TRUE(a.swap_blocks.empty());
  sp.allocate(c, 40);
  EXPECT_EQ(c.swap_blocks, (std::vector<int32_t>{0, 1, 2})) << "the lowest free blocks again";
  sp.check_invariants({&b, &c});
  EXPECT_THROW(SwapSpace(10, 0), std::invalid_argument);
  EXPECT_EQ(SwapSpace(0, 16).capacity_slots(), 0);
  EXPECT_FALSE(SwapSpace(0, 16).can_hold(1));
}

TEST(SwapSpace, PagedRunsAreWholeBlocksMergedWhereBothSidesAreContiguous) {
  for (int bs : {1, 4, 16}) {
    SCOPED_TRACE("block size " + std::to_string(bs));
    KvConfig config;
    config.kind = KvKind::paged;
    config.block_size = bs;
    config.prefix_caching = false;
    PagedKvManager kv(config, 64 * bs);
    // Every other arena block held: a's blocks can only lie in holes of one block each.
    std::vector<Sequence> fillers;
    for (int i = 0; i < 64; ++i) {
      fillers.push_back(make_seq(10 + i, kvtest::iota_tokens(bs), 1));  // one block, nothing reserved
      kv.allocate(fillers.back(), bs);
    }
    for (int i = 0; i < 64; i += 2) kv.release(fillers[static_cast<size_t>(i)]);
    Sequence a = make_seq(1, kvtest::iota_tokens(5 * bs), 4);
    kv.allocate(a, bs);
    for (int i = 1; i <= 4; ++i) kv.grow(a, (i + 1) * bs);
    const int n = 5 * bs - (bs > 1 ? 1 : 0);  // a partial last block
    SwapSpace sp(1024, bs);
    Sequence other = make_seq(2, kvtest::iota_tokens(bs), 4);
    sp.allocate(other, bs);  // host block 0 taken: a's host region starts at block 1
    sp.allocate(a, n);
    std::vector<KvSwap> runs;
    sp.runs(a, kv, 0, n, runs);
    expect_runs_cover(runs, a, kv, sp, 0, n);
    EXPECT_EQ(runs.size(), 5u) << "one run per scattered arena block";
    runs.clear();
    sp.runs(a, kv, bs + 1, n, runs);  // a leading shared prefix skipped (swap in)
    expect_runs_cover(runs, a, kv, sp, bs + 1, n);
    Sequence d = make_seq(3, kvtest::iota_tokens(4 * bs), 4);
    EXPECT_THROW(sp.runs(d, kv, 0, 1, runs), std::logic_error) << "no swap blocks";
  }
}

TEST(SwapSpace, NaiveRegionIsOneRunAskingTheManagerOnce) {
  KvConfig config;
  config.kind = KvKind::naive;
  config.reserve = NaiveReserve::oracle;
  NaiveKvManager kv(config, 256);
  Sequence filler = make_seq(1, kvtest::iota_tokens(30), 4), a = make_seq(2, kvtest::iota_tokens(50), 4);
  kv.allocate(filler, 30);
  kv.allocate(a, 50);
  SwapSpace sp(256, 16);
  sp.allocate(a, 50);
  std::vector<KvSwap> runs;
  sp.runs(a, kv, 0, 50, runs);
  ASSERT_EQ(runs.size(), 1u) << "fresh pool: contiguous host blocks, contiguous region";
  EXPECT_EQ(runs[0].device_slot, kv.slot(a, 0));
  EXPECT_EQ(runs[0].host_slot, 0);
  EXPECT_EQ(runs[0].n_slots, 50);
}

}  // namespace
}  // namespace servelab
