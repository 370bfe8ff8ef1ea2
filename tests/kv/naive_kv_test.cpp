#include "engine/kv/naive_kv.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "tests/kv/kv_test_util.h"

namespace servelab {
namespace naive_kv_test {  // named, not anonymous: a unity batch shares one translation unit

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
  const Sequence next = make_seq(2, kvtest::iota_tokens(50), 50);  // would reserve 128 slots
  const KvBreakdown b = kv.breakdown(live_of({&a}), &next);
  EXPECT_EQ(b.stored, 60);
  EXPECT_EQ(b.reserved, 39);
  EXPECT_EQ(b.internal_frag, 29);
  EXPECT_EQ(b.free, 6 * 128);  // the free 872 slots hold six more such regions
  EXPECT_EQ(b.external_frag, 872 - 6 * 128);
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
  // Against big's 35-slot reservation no free slot is usable; against a 30-slot one, the 30-slot
  // gap is and the 10-slot tail is not.
  const KvBreakdown br = kv.breakdown(live_of({&a, &c}), &big);
  EXPECT_EQ(br.free, 0);
  EXPECT_EQ(br.external_frag, 40);
  EXPECT_EQ(br.stored + br.reserved + br.internal_frag + br.external_frag + br.free, br.capacity);
  const Sequence same = make_seq(5, kvtest::iota_tokens(10), 21);
  const KvBreakdown bs = kv.breakdown(live_of({&a, &c}), &same);
  EXPECT_EQ(bs.free, 30);
  EXPECT_EQ(bs.external_frag, 10);
  kv.check_invariants(live_of({&a, &c}));
  kv.release(a);  // merges with [30, 60): first fit now lands at slot 0
  ASSERT_TRUE(kv.can_allocate(big, 5));
  kv.allocate(big, 5);
  EXPECT_EQ(big.kv.region_begin, 0);
  kv.check_invariants(live_of({&c, &big}));
}

TEST(NaiveKv, ExternalFragmentationIsFreeSpaceThatCannotHoldTheNextReservation) {
  // reserve: max with max_model_len 10 over 45 slots: four regions, then two non-adjacent ones
  // freed. Free extents 10, 10 and 5: both 10-slot gaps hold a reservation, only the 5-slot
  // tail is lost (Σ extent mod max_model_len), not everything outside the largest extent.
  NaiveKvManager kv(naive(NaiveReserve::max, 10), 45);
  std::vector<Sequence> s;
  for (int i = 0; i < 4; ++i) s.push_back(make_seq(i + 1, kvtest::iota_tokens(3), 3));
  for (Sequence& q : s) kv.allocate(q, 3);
  kv.release(s[0]);
  kv.release(s[2]);
  const KvBreakdown b = kv.breakdown(live_of({&s[1], &s[3]}));
  EXPECT_EQ(b.external_frag, 5);
  EXPECT_EQ(b.free, 20);
  EXPECT_EQ(b.used() + b.external_frag + b.free, b.capacity);
  // pow2/oracle: against the head of the queue's reservation, max_model_len when none waits.
  NaiveKvManager oracle(naive(NaiveReserve::oracle, 10), 45);
  std::vector<Sequence> t;
  for (int i = 0; i < 4; ++i) t.push_back(make_seq(i + 11, kvtest::iota_tokens(3), 3));
  for (Sequence& q : t) oracle.allocate(q, 3);  // 5 slots each: [0,5) [5,10) [10,15) [15,20)
  oracle.release(t[1]);
  const Sequence small = make_seq(9, kvtest::iota_tokens(2), 2);  // 3 slots
  const KvBreakdown o = oracle.breakdown(live_of({&t[0], &t[2], &t[3]}), &small);
  EXPECT_EQ(o.external_frag, 5 % 3 + 25 % 3);
  EXPECT_EQ(oracle.breakdown(live_of({&t[0], &t[2], &t[3]})).external_frag, 5 + 25 % 10);
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

}  // namespace naive_kv_test
}  // namespace servelab
