#include "engine/kv/naive_kv.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "tests/kv/kv_test_util.h"

namespace servelab {
namespace {

using kvtest::live_of;
using kvtest::make_seq;

KvConfig naive(NaiveReserve reserve, int max_model_len = 2048) {
  KvConfig c;
  c.kind = KvKind::naive;
  c.reserve = reserve;
  c.max_model_len = max_model_len;
  return c;
}

TEST(NaiveKv, ReservationFollowsPolicy) {
  const Sequence s300 = make_seq(1, kvtest::iota_tokens(100), 200);   // final 300
  const Sequence s2000 = make_seq(2, kvtest::iota_tokens(1000), 1000);  // final 2000
  const Sequence s3000 = make_seq(3, kvtest::iota_tokens(1000), 2000);  // final 3000
  NaiveKvManager max_kv(naive(NaiveReserve::max), 10000);
  NaiveKvManager pow2_kv(naive(NaiveReserve::pow2), 10000);
  NaiveKvManager oracle_kv(naive(NaiveReserve::oracle), 10000);
  EXPECT_EQ(max_kv.reservation_slots(s300), 2048);
  EXPECT_EQ(pow2_kv.reservation_slots(s300), 512);
  EXPECT_EQ(pow2_kv.reservation_slots(s2000), 2048);
  EXPECT_EQ(pow2_kv.reservation_slots(s3000), 2048);  // capped at max_model_len
  EXPECT_EQ(oracle_kv.reservation_slots(s300), 299);  // the 300th token's K/V is never computed
  EXPECT_EQ(oracle_kv.slots_needed(s300, 100), 299);  // unallocated: the whole reservation
}

TEST(NaiveKv, ReservationsCoverTheFilledPositionsOnly) {
  // A sequence of final length n computes K/V for n − 1 positions: the last sampled token is
  // never fed back. pow2 rounds that count, so final length 129 fits a 128-slot region.
  const Sequence s129 = make_seq(1, kvtest::iota_tokens(100), 29);
  const Sequence s128 = make_seq(2, kvtest::iota_tokens(100), 28);
  NaiveKvManager pow2_kv(naive(NaiveReserve::pow2), 10000);
  NaiveKvManager oracle_kv(naive(NaiveReserve::oracle), 10000);
  EXPECT_EQ(pow2_kv.reservation_slots(s129), 128);
  EXPECT_EQ(pow2_kv.reservation_slots(s128), 128);
  EXPECT_EQ(oracle_kv.reservation_slots(s129), 128);
  // Fully decoded (128 positions computed, the 129th token sampled): nothing is left reserved.
  Sequence done = s129;
  oracle_kv.allocate(done, 100);
  done.tokens.resize(128, 3);
  done.n_computed = 128;
  const KvBreakdown b = oracle_kv.breakdown(live_of({&done}));
  EXPECT_EQ(b.stored, 128);
  EXPECT_EQ(b.reserved, 0);
  EXPECT_EQ(b.internal_frag, 0);
  // A one-token output needs only its prompt.
  EXPECT_EQ(oracle_kv.reservation_slots(make_seq(3, kvtest::iota_tokens(7), 1)), 7);
}

TEST(NaiveKv, AllocateGrowReleaseWithinRegion) {
  NaiveKvManager kv(naive(NaiveReserve::pow2), 1000);
  Sequence a = make_seq(1, kvtest::iota_tokens(50), 50);  // fills 99 positions -> region 128
  ASSERT_TRUE(kv.can_allocate(a, 50));
  EXPECT_FALSE(kv.can_allocate(a, 129));  // more than the region it would get
  kv.allocate(a, 50);
  EXPECT_EQ(a.kv.region_begin, 0);
  EXPECT_EQ(a.kv.region_slots, 128);
  EXPECT_EQ(kv.free_slots(), 872);
  EXPECT_EQ(kv.slot(a, 7), 7);
  EXPECT_TRUE(kv.can_grow(a, 128));
  EXPECT_EQ(kv.slots_needed(a, 128), 0);
  EXPECT_FALSE(kv.can_grow(a, 129));
  EXPECT_THROW(kv.grow(a, 129), std::logic_error);
  EXPECT_THROW(kv.slot(a, 128), std::out_of_range);
  EXPECT_THROW(kv.allocate(a, 10), std::logic_error);  // already allocated
  a.n_computed = 60;
  const KvBreakdown b = kv.breakdown(live_of({&a}));
  EXPECT_EQ(b.stored, 60);
  EXPECT_EQ(b.reserved, 39);
  EXPECT_EQ(b.internal_frag, 29);
  EXPECT_EQ(b.free, 872);
  EXPECT_EQ(b.external_frag, 0);
  kv.check_invariants(live_of({&a}));
  kv.release(a);
  kv.release(a);  // idempotent
  EXPECT_FALSE(a.kv.allocated);
  EXPECT_EQ(kv.free_slots(), 1000);
  kv.check_invariants({});
}

TEST(NaiveKv, ExternalFragmentationBlocksALargeRequest) {
  NaiveKvManager kv(naive(NaiveReserve::oracle), 100);
  Sequence a = make_seq(1, kvtest::iota_tokens(10), 21);  // 30 slots each (final 31)
  Sequence b = make_seq(2, kvtest::iota_tokens(10), 21);
  Sequence c = make_seq(3, kvtest::iota_tokens(10), 21);
  for (Sequence* s : {&a, &b, &c}) kv.allocate(*s, 10);
  EXPECT_EQ(b.kv.region_begin, 30);
  kv.release(b);  // free: [30, 60) and [90, 100)
  Sequence big = make_seq(4, kvtest::iota_tokens(5), 31);  // 35 slots: > the 30-slot gap, < 40 free
  EXPECT_EQ(kv.free_slots(), 40);
  EXPECT_FALSE(kv.can_allocate(big, 5));
  const KvBreakdown br = kv.breakdown(live_of({&a, &c}));
  EXPECT_EQ(br.free, 30);
  EXPECT_EQ(br.external_frag, 10);
  EXPECT_EQ(br.stored + br.reserved + br.internal_frag + br.external_frag + br.free, br.capacity);
  kv.check_invariants(live_of({&a, &c}));
  kv.release(a);  // merges with [30, 60): first fit now lands at slot 0
  ASSERT_TRUE(kv.can_allocate(big, 5));
  kv.allocate(big, 5);
  EXPECT_EQ(big.kv.region_begin, 0);
  kv.check_invariants(live_of({&c, &big}));
}

TEST(NaiveKv, ForkReservesAndCopiesComputedPrefix) {
  NaiveKvManager kv(naive(NaiveReserve::oracle), 100);
  Sequence parent = make_seq(1, kvtest::iota_tokens(12), 8);
  kv.allocate(parent, 12);
  parent.n_computed = 12;
  Sequence child = parent;
  child.id = 2;
  child.kv = KvHandle{};
  kv.fork(parent, child);
  EXPECT_EQ(child.kv.region_begin, 19);  // parent fills 19 positions
  const auto copies = kv.take_pending_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src_slot, 0);
  EXPECT_EQ(copies[0].dst_slot, 19);
  EXPECT_EQ(copies[0].n_slots, 12);
  EXPECT_TRUE(kv.take_pending_copies().empty());
  kv.check_invariants(live_of({&parent, &child}));
}

TEST(NaiveKv, InvariantCheckCatchesOverlap) {
  NaiveKvManager kv(naive(NaiveReserve::oracle), 100);
  Sequence a = make_seq(1, kvtest::iota_tokens(10), 10);
  Sequence b = make_seq(2, kvtest::iota_tokens(10), 10);
  kv.allocate(a, 10);
  kv.allocate(b, 10);
  Sequence forged = b;
  forged.id = 3;  // a second seq claiming b's region
  EXPECT_THROW(kv.check_invariants(live_of({&a, &b, &forged})), std::logic_error);
  EXPECT_THROW(kv.check_invariants(live_of({&a})), std::logic_error);  // b's region leaked
}

TEST(NaiveKv, RejectsEmptyArena) {
  KvConfig c = naive(NaiveReserve::max);
  EXPECT_THROW(make_kv_manager(c, 0), std::invalid_argument);
  EXPECT_EQ(make_kv_manager(c, 1)->capacity_slots(), 1);
}

}  // namespace
}  // namespace servelab
