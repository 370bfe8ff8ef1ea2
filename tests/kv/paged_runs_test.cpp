// The paged manager places a sequence's blocks in physical runs (BlockRuns): what it takes, what
// it reserves, what pressure takes back, and that free space, admission and the prefix cache do
// not see the difference.
#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/kv/block_runs.h"
#include "engine/kv/paged_churn.h"
#include "engine/kv/paged_kv.h"
#include "tests/kv/kv_test_util.h"

namespace servelab {
namespace {

using kvtest::live_of;
using kvtest::make_seq;

using kvtest::paged_config;

int64_t runs_of(const Sequence& s) {
  TableRuns r;
  r.add(s.kv.blocks);
  return r.runs;
}

void check_runs(const BlockRuns& r, int32_t n_blocks) {
  std::vector<char> mark(static_cast<size_t>(n_blocks), 0);
  EXPECT_EQ(r.check(mark), "");
}

TEST(BlockRuns, TakesTheNextBlockThenBestFitThenSplitsTheLargestReservation) {
  BlockRuns r(20);
  r.add_all();
  EXPECT_EQ(r.take(1, BlockRuns::kNone, 5, true), 0);  // fresh: the only extent's start
  EXPECT_EQ(r.reserved(1), 4);                         // blocks 1..4 follow it
  EXPECT_EQ(r.size(), 19);                             // reserved blocks are free
  EXPECT_EQ(r.take(1, 0, 4, true), 1);                 // the run continues
  EXPECT_EQ(r.take(2, BlockRuns::kNone, 3, true), 5);  // the rest of the arena: extent [5, 20)
  EXPECT_EQ(r.reserved(2), 2);
  check_runs(r, 20);
  // Holes: give back 10 and 11, and 14..16, by taking everything and returning them.
  for (int32_t b = 8; b < 20; ++b) EXPECT_EQ(r.take(9, b - 1, 1, false), b);
  for (int32_t b : {10, 11, 14, 15, 16}) r.add(b);
  check_runs(r, 20);
  EXPECT_EQ(r.take(3, BlockRuns::kNone, 2, true), 10);  // smallest extent that holds 2
  EXPECT_EQ(r.reserved(3), 1);
  EXPECT_EQ(r.take(4, BlockRuns::kNone, 3, true), 14);  // the one that holds 3
  // No extent left: the top of the largest reservation (seq 1's 2..4), as much as wanted.
  EXPECT_EQ(r.take(5, BlockRuns::kNone, 1, true), 4);
  EXPECT_EQ(r.reserved(1), 2);
  EXPECT_EQ(r.take(1, 1, 3, true), 2);  // seq 1 keeps the rest
  EXPECT_EQ(r.take(7, BlockRuns::kNone, 1, true, false), BlockRuns::kNone) << "splitting not allowed";
  // One that wants at least as much as the largest holds takes all of it.
  EXPECT_EQ(r.take(8, BlockRuns::kNone, 5, true), 15);
  EXPECT_EQ(r.reserved(4), 0);
  EXPECT_EQ(r.reserved(8), 1);
  check_runs(r, 20);
  r.drop(2);  // 6, 7 back
  EXPECT_EQ(r.reserved(2), 0);
  EXPECT_EQ(r.take(6, BlockRuns::kNone, 2, true), 6);
  check_runs(r, 20);
}

TEST(BlockRuns, ACopyOnWriteLeavesTheReservationAlone) {
  BlockRuns r(10);
  r.add_all();
  EXPECT_EQ(r.take(1, BlockRuns::kNone, 4, true), 0);
  EXPECT_EQ(r.reserved(1), 3);
  EXPECT_EQ(r.take(1, BlockRuns::kNone, 4, false), 4);  // an inner block elsewhere
  EXPECT_EQ(r.reserved(1), 3);
  EXPECT_EQ(r.take(1, 0, 3, true), 1);
  check_runs(r, 10);
}

TEST(PagedKvRuns, SequencesGrowingTogetherOnAFreshArenaEachFormOneRun) {
  PagedKvManager kv(paged_config(), 16 * 100);
  std::vector<Sequence> seqs;
  for (uint64_t i = 0; i < 4; ++i) seqs.push_back(make_seq(i + 1, kvtest::iota_tokens(20, 100 * (i + 1)), 300));
  for (Sequence& s : seqs) {
    kv.allocate(s, 20);
    s.n_computed = 20;
  }
  for (int step = 0; step < 299; ++step)
    for (Sequence& s : seqs) {
      s.tokens.push_back(7);
      kv.grow(s, s.n_computed + 1);
      ++s.n_computed;
    }
  for (const Sequence& s : seqs) {
    EXPECT_EQ(s.kv.blocks.size(), 20u);  // 319 positions
    EXPECT_EQ(runs_of(s), 1) << "seq " << s.id;
    EXPECT_EQ(kv.reserved_blocks(s.id), 0);  // all it will take, taken
  }
  kv.check_invariants(live_of({&seqs[0], &seqs[1], &seqs[2], &seqs[3]}));
  EXPECT_EQ(kv.free_slots(), 16 * 20);
}

TEST(PagedKvRuns, OnAChurnedArenaANewSequenceTakesTheSmallestHoleThatHoldsIt) {
  PagedKvManager kv(paged_config(16, false), 16 * 40);
  std::vector<Sequence> fillers;
  for (uint64_t i = 0; i < 40; ++i) {
    fillers.push_back(make_seq(100 + i, kvtest::iota_tokens(16), 1));  // one block, nothing reserved
    kv.allocate(fillers.back(), 16);
  }
  EXPECT_EQ(fillers[7].kv.blocks[0], 7);
  // Holes: [2, 4) [10, 16) [20, 32)
  for (int b : {2, 3, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31}) kv.release(fillers[b]);
  Sequence a = make_seq(1, kvtest::iota_tokens(40), 50);  // 3 blocks now, 6 at most (89 positions)
  kv.allocate(a, 40);
  EXPECT_EQ(a.kv.blocks, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(kv.reserved_blocks(1), 3);  // 13..15
  Sequence b = make_seq(2, kvtest::iota_tokens(20), 10);  // 2 blocks at most
  kv.allocate(b, 20);
  EXPECT_EQ(b.kv.blocks, (std::vector<int32_t>{2, 3}));
  for (int n = 41; n <= 89; ++n) {
    a.tokens.push_back(9);
    kv.grow(a, n);
  }
  EXPECT_EQ(a.kv.blocks, (std::vector<int32_t>{10, 11, 12, 13, 14, 15}));
  std::vector<const Sequence*> live = {&a, &b};
  for (const Sequence& f : fillers)
    if (f.kv.allocated) live.push_back(&f);
  kv.check_invariants(live);
}

TEST(PagedKvRuns, ReservationsCountAsFreeAndPressureTakesThemBack) {
  PagedKvManager kv(paged_config(), 16 * 10);
  Sequence a = make_seq(1, kvtest::iota_tokens(16), 300);  // 1 block now, up to 20
  kv.allocate(a, 16);
  EXPECT_EQ(a.kv.blocks, (std::vector<int32_t>{0}));
  EXPECT_EQ(kv.reserved_blocks(1), 9);
  EXPECT_EQ(kv.free_slots(), 16 * 9);  // admission sees every block a does not hold
  const KvBreakdown br = kv.breakdown(live_of({&a}));
  EXPECT_EQ(br.free, 16 * 9);
  EXPECT_EQ(br.stored + br.reserved + br.internal_frag, 16);
  // A sequence that needs every free block is admitted: it takes a's reservation.
  Sequence b = make_seq(2, kvtest::iota_tokens(144, 5000), 1);
  ASSERT_TRUE(kv.can_allocate(b, 144));
  kv.allocate(b, 144);
  EXPECT_EQ(kv.free_slots(), 0);
  EXPECT_EQ(kv.reserved_blocks(1), 0);
  EXPECT_EQ(b.kv.blocks.front(), 1) << "all of a's reservation: it wants that much";
  EXPECT_EQ(runs_of(b), 1);
  a.tokens.push_back(1);
  EXPECT_FALSE(kv.can_grow(a, 17));
  kv.check_invariants(live_of({&a, &b}));
  kv.release(b);
  EXPECT_TRUE(kv.can_grow(a, 17));
  kv.grow(a, 17);
  EXPECT_EQ(a.kv.blocks, (std::vector<int32_t>{0, 1}));
  kv.release(a);
  EXPECT_EQ(kv.free_slots(), 160);
  kv.check_invariants({});
}

TEST(PagedKvRuns, CachedBlocksGoAfterUnclaimedOnesAndBeforeOthersReservations) {
  PagedKvManager kv(paged_config(), 16 * 10);
  std::vector<TokenId> prompt = kvtest::iota_tokens(40);
  Sequence a = make_seq(1, prompt, 4);
  kv.allocate(a, 40);  // blocks 0, 1, 2
  a.n_computed = 40;
  kv.on_computed(a);
  kv.release(a);  // 0 and 1 cached (block 2 is partial: nothing cached)
  EXPECT_EQ(kv.n_cached_blocks(), 2u);
  Sequence r = make_seq(2, kvtest::iota_tokens(16, 3000), 500);
  kv.allocate(r, 16);
  EXPECT_EQ(r.kv.blocks, (std::vector<int32_t>{2})) << "unclaimed blocks before cached ones";
  EXPECT_EQ(kv.reserved_blocks(2), 7);
  {
    PagedKvManager copy = kv;  // the cache still serves while blocks are reserved
    Sequence again = make_seq(3, prompt, 4);
    copy.allocate(again, 40);
    EXPECT_EQ(again.kv.n_cached_prefix, 32);
    EXPECT_EQ(again.kv.blocks[0], 0);
    EXPECT_EQ(again.kv.blocks[1], 1);
  }
  // 7 blocks: the 2 cached blocks go (one run, in order) before r's reservation is cut, then
  // the top of r's reservation.
  Sequence filler = make_seq(4, kvtest::iota_tokens(112, 5000), 1);
  kv.allocate(filler, 112);
  EXPECT_EQ(kv.n_cached_blocks(), 0u);
  EXPECT_EQ(filler.kv.blocks, (std::vector<int32_t>{0, 1, 6, 7, 8, 9, 5}));
  EXPECT_EQ(kv.reserved_blocks(2), 2);  // 3 and 4
  kv.check_invariants(live_of({&r, &filler}));
}

TEST(PagedKvRuns, AGrowingSequenceTakesTheCachedBlockAfterItsLast) {
  PagedKvManager kv(paged_config(), 16 * 8);
  Sequence a = make_seq(1, kvtest::iota_tokens(32), 1);  // blocks 0, 1: no reservation
  kv.allocate(a, 32);
  Sequence c = make_seq(2, kvtest::iota_tokens(33, 500), 1);  // blocks 2, 3, 4
  kv.allocate(c, 33);
  c.n_computed = 33;
  kv.on_computed(c);  // 2 and 3 cached
  kv.release(c);
  EXPECT_EQ(kv.n_cached_blocks(), 2u);
  a.sampling.max_tokens = 40;  // a now goes on: 72 positions at most
  a.tokens.push_back(5);
  kv.grow(a, 33);
  EXPECT_EQ(a.kv.blocks, (std::vector<int32_t>{0, 1, 2})) << "block 2 leaves the cache: the run goes on";
  EXPECT_EQ(kv.n_cached_blocks(), 0u) << "block 3 too: a will take it";
  EXPECT_EQ(kv.reserved_blocks(1), 2);  // 3 and 4
  kv.check_invariants(live_of({&a}));
}

TEST(PagedKvRuns, AForkedChildCopiesItsTailIntoANewRun) {
  PagedKvManager kv(paged_config(), 16 * 40);
  Sequence parent = make_seq(1, kvtest::iota_tokens(20), 60);
  kv.allocate(parent, 20);
  parent.n_computed = 20;
  Sequence child = parent;
  child.id = 2;
  child.kv = KvHandle{};
  kv.fork(parent, child);
  for (int n = 21; n <= 79; ++n) {
    for (Sequence* s : {&parent, &child}) {
      s->tokens.push_back(n);
      kv.grow(*s, n);
      s->n_computed = n;
    }
  }
  EXPECT_EQ(kv.take_pending_copies().size(), 1u);
  EXPECT_EQ(parent.kv.blocks[0], child.kv.blocks[0]);
  EXPECT_EQ(runs_of(parent), 2) << "the shared first block, then its own run";
  EXPECT_EQ(runs_of(child), 2);
  kv.check_invariants(live_of({&parent, &child}));
}

TEST(PagedKvRuns, ASeededChurnKeepsLongRuns) {
  PagedChurnConfig c;
  c.ctx = 2048;
  c.n_targets = 8;
  c.warmup_steps = 400;
  c.seed = 7;
  const PagedChurnResult r = run_paged_churn(c);
  ASSERT_EQ(r.tables.size(), 8u);
  for (const auto& t : r.tables) EXPECT_EQ(t.size(), 128u);
  std::printf("paged churn (ctx %d, %d targets, block 16, %lld blocks, %lld steps, %lld background, %lld prefix-cached tokens): "
              "%.1f blocks per physical run (%lld runs)\n",
              c.ctx, c.n_targets, static_cast<long long>(r.n_blocks), static_cast<long long>(r.n_steps),
              static_cast<long long>(r.n_background), static_cast<long long>(r.n_cached_prefix_tokens), r.mean_run_blocks(),
              static_cast<long long>(r.table_runs));
  EXPECT_GT(r.n_background, 100);
  EXPECT_GT(r.n_cached_prefix_tokens, 0);
  EXPECT_GE(r.mean_run_blocks(), 16.0);  // 28.4 at 5a5f13f; 1.5 for the least-recently-freed list before
  EXPECT_EQ(run_paged_churn(c).tables, r.tables) << "seeded";
}

TEST(PagedKvRuns, ChurnConfigErrorsNameTheField) {
  PagedChurnConfig c;
  c.ctx = 1;
  try {
    run_paged_churn(c);
    FAIL() << "accepted ctx 1";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ctx"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace servelab
