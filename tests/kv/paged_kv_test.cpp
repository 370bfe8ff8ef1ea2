#include "engine/kv/paged_kv.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "tests/kv/kv_test_util.h"

namespace servelab {
namespace {

using kvtest::live_of;
using kvtest::make_seq;

using kvtest::paged_config;

std::string message_of(const KvConfig& c, int64_t n_slots) {
  try {
    make_kv_manager(c, n_slots);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(PagedKv, BlockTablesMapPositionsToSlots) {
  PagedKvManager kv(paged_config(), 160);  // 10 blocks
  Sequence a = make_seq(1, kvtest::iota_tokens(20), 30);
  ASSERT_EQ(kv.slots_needed(a, 20), 32);
  kv.allocate(a, 20);
  ASSERT_EQ(a.kv.blocks.size(), 2u);
  EXPECT_EQ(kv.slot(a, 17), int64_t{a.kv.blocks[1]} * 16 + 1);
  EXPECT_THROW(kv.slot(a, 32), std::out_of_range);
  EXPECT_EQ(kv.free_slots(), 128);
  EXPECT_EQ(kv.slots_needed(a, 32), 0);
  EXPECT_EQ(kv.slots_needed(a, 33), 16);
  kv.grow(a, 33);
  EXPECT_EQ(a.kv.blocks.size(), 3u);
  a.n_computed = 33;
  const KvBreakdown b = kv.breakdown(live_of({&a}));
  EXPECT_EQ(b.capacity, 160);
  EXPECT_EQ(b.stored, 33);
  EXPECT_EQ(b.reserved, 15);  // rest of the last block: final length 50 lies beyond it
  EXPECT_EQ(b.internal_frag, 0);
  EXPECT_EQ(b.free, 112);
  kv.check_invariants(live_of({&a}));
  kv.release(a);
  kv.release(a);
  EXPECT_EQ(kv.free_slots(), kv.capacity_slots());
  kv.check_invariants({});
}

TEST(PagedKv, InternalFragmentationIsTheTailPastTheFinalLength) {
  PagedKvManager kv(paged_config(), 160);
  Sequence a = make_seq(1, kvtest::iota_tokens(10), 10);  // final 20, fills 19 -> 2 blocks, 13 slots past it
  kv.allocate(a, 20);
  a.n_computed = 10;
  const KvBreakdown b = kv.breakdown(live_of({&a}));
  EXPECT_EQ(b.stored, 10);
  EXPECT_EQ(b.reserved, 9);  // the 20th token's K/V is never computed
  EXPECT_EQ(b.internal_frag, 13);
}

TEST(PagedKv, SharesPromptPrefixBlocksByHash) {
  PagedKvManager kv(paged_config(), 160);  // 10 blocks
  std::vector<TokenId> prompt = kvtest::iota_tokens(40);
  Sequence a = make_seq(1, prompt, 8);
  kv.allocate(a, 40);
  EXPECT_EQ(a.kv.n_cached_prefix, 0);
  a.n_computed = 40;
  kv.on_computed(a);  // registers blocks 0 and 1 (block 2 is partial)
  EXPECT_EQ(kv.n_cached_blocks(), 2u);
  EXPECT_EQ(a.kv.n_registered, 2);
  EXPECT_EQ(a.kv.register_at, 48);  // nothing more to register before block 2 is computed
  kv.check_invariants(live_of({&a}));
  a.kv.register_at = 32;  // a skip point that disagrees with the count is caught
  EXPECT_THROW(kv.check_invariants(live_of({&a})), std::logic_error);
  a.kv.register_at = 48;
  a.kv.n_registered = 1;  // a count that disagrees with the blocks is caught
  EXPECT_THROW(kv.check_invariants(live_of({&a})), std::logic_error);
  a.kv.n_registered = 3;
  EXPECT_THROW(kv.check_invariants(live_of({&a})), std::logic_error);
  a.kv.n_registered = 2;

  std::vector<TokenId> longer = prompt;
  longer.insert(longer.end(), {900, 901, 902, 903, 904});
  Sequence b = make_seq(2, longer, 8);
  EXPECT_EQ(kv.slots_needed(b, 45), 16);  // only the third block is new
  kv.allocate(b, 45);
  EXPECT_EQ(b.kv.n_cached_prefix, 32);
  EXPECT_EQ(b.kv.n_registered, 2);  // the hits are registered already
  EXPECT_EQ(b.kv.blocks[0], a.kv.blocks[0]);
  EXPECT_EQ(b.kv.blocks[1], a.kv.blocks[1]);
  EXPECT_NE(b.kv.blocks[2], a.kv.blocks[2]);
  EXPECT_EQ(kv.ref_count(a.kv.blocks[0]), 2);
  EXPECT_EQ(kv.ref_count(a.kv.blocks[2]), 1);
  b.n_computed = b.kv.n_cached_prefix;
  const KvBreakdown br = kv.breakdown(live_of({&a, &b}));
  EXPECT_EQ(br.stored, 40 + 0);  // a's 40 tokens; b's 32 cached tokens are the same slots
  EXPECT_EQ(br.stored + br.reserved + br.internal_frag, 4 * 16);
  kv.check_invariants(live_of({&a, &b}));

  const int32_t shared0 = a.kv.blocks[0], shared1 = a.kv.blocks[1];
  kv.release(a);
  kv.release(b);
  EXPECT_EQ(kv.free_slots(), 160);  // cached but unreferenced blocks count as free
  EXPECT_EQ(kv.breakdown({}).free, 160);
  kv.check_invariants({});

  Sequence c = make_seq(3, prompt, 8);  // same prompt again, after everyone left
  kv.allocate(c, 40);
  EXPECT_EQ(c.kv.n_cached_prefix, 32);
  EXPECT_EQ(c.kv.blocks[0], shared0);
  EXPECT_EQ(c.kv.blocks[1], shared1);
  EXPECT_EQ(kv.ref_count(shared0), 1);
  EXPECT_EQ(kv.free_slots(), 160 - 3 * 16);
  kv.check_invariants(live_of({&c}));
}

TEST(PagedKv, NeverReusesTheBlockHoldingTheLastPromptToken) {
  PagedKvManager kv(paged_config(), 160);
  Sequence a = make_seq(1, kvtest::iota_tokens(32), 4);
  kv.allocate(a, 32);
  a.n_computed = 32;
  kv.on_computed(a);
  Sequence b = make_seq(2, kvtest::iota_tokens(32), 4);
  kv.allocate(b, 32);
  EXPECT_EQ(b.kv.n_cached_prefix, 16);  // block 1 ends at the last prompt token
}

TEST(PagedKv, HashChainsThroughEarlierBlocks) {
  PagedKvManager kv(paged_config(), 160);
  Sequence a = make_seq(1, kvtest::iota_tokens(40), 4);
  kv.allocate(a, 40);
  a.n_computed = 40;
  kv.on_computed(a);
  std::vector<TokenId> other = kvtest::iota_tokens(40);
  other[3] = 777;  // block 0 differs, block 1 is identical
  Sequence b = make_seq(2, other, 4);
  kv.allocate(b, 40);
  EXPECT_EQ(b.kv.n_cached_prefix, 0);
}

TEST(PagedKv, PrefixCachingOffSharesNothing) {
  PagedKvManager kv(paged_config(16, false), 160);
  Sequence a = make_seq(1, kvtest::iota_tokens(40), 4);
  kv.allocate(a, 40);
  a.n_computed = 40;
  kv.on_computed(a);
  EXPECT_EQ(kv.n_cached_blocks(), 0u);
  Sequence b = make_seq(2, kvtest::iota_tokens(40), 4);
  kv.allocate(b, 40);
  EXPECT_EQ(b.kv.n_cached_prefix, 0);
}

TEST(PagedKv, CachedBlocksAreEvictedAfterUncachedFreeBlocks) {
  PagedKvManager kv(paged_config(), 160);  // 10 blocks
  Sequence a = make_seq(1, kvtest::iota_tokens(40), 4);
  kv.allocate(a, 40);
  a.n_computed = 40;
  kv.on_computed(a);
  kv.release(a);  // 2 cached blocks + 8 plain free blocks
  Sequence filler = make_seq(2, kvtest::iota_tokens(128, 5000), 1);
  kv.allocate(filler, 128);  // 8 blocks: takes every uncached block first
  Sequence again = make_seq(3, kvtest::iota_tokens(40), 4);
  EXPECT_EQ(kv.slots_needed(again, 40), 3 * 16);  // 2 cached blocks leave the free list + 1 new
  EXPECT_FALSE(kv.can_allocate(again, 40));
  kv.release(filler);
  kv.allocate(again, 40);
  EXPECT_EQ(again.kv.n_cached_prefix, 32);
  kv.release(again);
  Sequence evictor = make_seq(4, kvtest::iota_tokens(160, 9000), 1);
  kv.allocate(evictor, 160);  // all 10 blocks: the cache must give its blocks up
  kv.release(evictor);
  Sequence late = make_seq(5, kvtest::iota_tokens(40), 4);
  kv.allocate(late, 40);
  EXPECT_EQ(late.kv.n_cached_prefix, 0);
  EXPECT_EQ(kv.n_cached_blocks(), 0u);
  kv.check_invariants(live_of({&late}));
}

TEST(PagedKv, ForkThenGrowCopiesTheSharedLastBlockOnce) {
  PagedKvManager kv(paged_config(), 160);
  Sequence parent = make_seq(1, kvtest::iota_tokens(20), 10);
  kv.allocate(parent, 20);
  parent.n_computed = 20;
  Sequence child = parent;
  child.id = 2;
  child.sample_index = 1;
  child.kv = KvHandle{};
  kv.fork(parent, child);
  EXPECT_EQ(child.kv.blocks, parent.kv.blocks);
  const int32_t b0 = parent.kv.blocks[0], b1 = parent.kv.blocks[1];
  EXPECT_EQ(kv.ref_count(b0), 2);
  EXPECT_EQ(kv.ref_count(b1), 2);
  const KvBreakdown shared = kv.breakdown(live_of({&parent, &child}));
  EXPECT_EQ(shared.stored, 20);  // physical blocks counted once
  EXPECT_EQ(shared.stored + shared.reserved + shared.internal_frag, 32);
  kv.check_invariants(live_of({&parent, &child}));

  parent.tokens.push_back(500);  // parent decodes position 20, inside shared block 1
  EXPECT_EQ(kv.slots_needed(parent, 21), 16);  // no new block, but one copy
  // Position 20 lies inside a block parent holds: only the sharing makes allocate_slots copy.
  ASSERT_TRUE(kv.allocate_slots(parent, 1));
  const int32_t fresh = parent.kv.blocks[1];
  EXPECT_NE(fresh, b1);
  EXPECT_EQ(parent.kv.blocks[0], b0);
  const auto copies = kv.take_pending_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src_slot, int64_t{b1} * 16);
  EXPECT_EQ(copies[0].dst_slot, int64_t{fresh} * 16);
  EXPECT_EQ(copies[0].n_slots, 4);  // positions 16..19 are filled
  EXPECT_TRUE(kv.take_pending_copies().empty());
  EXPECT_EQ(kv.ref_count(b0), 2);
  EXPECT_EQ(kv.ref_count(b1), 1);
  EXPECT_EQ(kv.ref_count(fresh), 1);
  parent.n_computed = 21;

  child.tokens.push_back(600);  // the child now owns b1 alone: no copy
  kv.grow(child, 21);
  EXPECT_EQ(child.kv.blocks[1], b1);
  EXPECT_TRUE(kv.take_pending_copies().empty());
  child.n_computed = 21;
  kv.check_invariants(live_of({&parent, &child}));
  kv.release(parent);
  EXPECT_EQ(kv.ref_count(b0), 1);
  kv.release(child);
  EXPECT_EQ(kv.free_slots(), 160);
  kv.check_invariants({});

  // Nothing shared any more: inside its blocks a sequence needs nothing, past them a new block.
  Sequence solo = make_seq(3, kvtest::iota_tokens(20), 40);
  kv.allocate(solo, 20);
  solo.n_computed = 20;
  ASSERT_TRUE(kv.allocate_slots(solo, 12));
  EXPECT_EQ(solo.kv.blocks.size(), 2u);
  EXPECT_EQ(kv.free_slots(), 128);
  ASSERT_TRUE(kv.allocate_slots(solo, 13));
  EXPECT_EQ(solo.kv.blocks.size(), 3u);
  EXPECT_TRUE(kv.take_pending_copies().empty());
  kv.check_invariants(live_of({&solo}));
}

TEST(PagedKv, CanGrowCountsTheCopyOnWriteBlock) {
  PagedKvManager kv(paged_config(), 32);  // exactly 2 blocks
  Sequence parent = make_seq(1, kvtest::iota_tokens(20), 10);
  kv.allocate(parent, 20);
  parent.n_computed = 20;
  Sequence child = parent;
  child.id = 2;
  child.kv = KvHandle{};
  kv.fork(parent, child);
  EXPECT_EQ(kv.free_slots(), 0);
  EXPECT_TRUE(kv.can_grow(parent, 20));  // nothing to write
  EXPECT_FALSE(kv.can_grow(parent, 21));  // would write into shared block 1
  EXPECT_THROW(kv.grow(parent, 21), std::logic_error);
  kv.check_invariants(live_of({&parent, &child}));
}

TEST(PagedKv, InvariantCheckCatchesDoubleOwnership) {
  PagedKvManager kv(paged_config(), 160);
  Sequence a = make_seq(1, kvtest::iota_tokens(20), 4);
  Sequence b = make_seq(2, kvtest::iota_tokens(20), 4);
  kv.allocate(a, 20);
  kv.allocate(b, 20);
  b.kv.blocks[0] = a.kv.blocks[0];  // corrupt: two tables, one block, ref 1
  EXPECT_THROW(kv.check_invariants(live_of({&a, &b})), std::logic_error);
  EXPECT_THROW(kv.check_invariants(live_of({&a})), std::logic_error);  // b's blocks leaked
}

TEST(PagedKv, ConfigErrorsNameTheField) {
  KvConfig zero = paged_config(0);
  EXPECT_NE(message_of(zero, 1024).find("kv.block_size"), std::string::npos);
  EXPECT_THROW(zero.validate(), std::invalid_argument);
  const std::string small = message_of(paged_config(16), 15);
  EXPECT_NE(small.find("smaller than one block"), std::string::npos) << small;
  EXPECT_NE(small.find("kv.block_size"), std::string::npos) << small;
  EXPECT_EQ(message_of(paged_config(16), 16), "");
  EXPECT_EQ(make_kv_manager(paged_config(16), 100)->capacity_slots(), 96);  // whole blocks only
}

}  // namespace
}  // namespace servelab
