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
  EXPECT_EQ(oracle_kv.reservation_slots(s300), 300);
  EXPECT_EQ(oracle_kv.slots_needed(s300, 100), 300);  // unallocated: the whole reservation
}

TEST(NaiveKv, AllocateGrowReleaseWithinRegion) {
  NaiveKvManager kv(naive(NaiveReserve::pow2), 1000);
  Sequence a = make_seq(1, kvtest::iota_tokens(50), 50);  // final 100 -> region 128
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
  EXPECT_EQ(b.reserved, 40);
  EXPECT_EQ(b.internal_frag, 28);
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
  Sequence a = make_seq(1, kvtest::iota_tokens(10), 20);  // 30 slots each
  Sequence b = make_seq(2, kvtest::iota_tokens(10), 20);
  Sequence c = make_seq(3, kvtest::iota_tokens(10), 20);
  for (Sequence* s : {&a, &b, &c}) kv.allocate(*s, 10);
  EXPECT_EQ(b.kv.region_begin, 30);
  kv.release(b);  // free: [30, 60) and [90, 100)
  Sequence big = make_seq(4, kvtest::iota_tokens(5), 30);  // 35 slots: > the 30-slot gap, < 40 free
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
  EXPECT_EQ(child.kv.region_begin, 20);
  const auto copies = kv.take_pending_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src_slot, 0);
  EXPECT_EQ(copies[0].dst_slot, 20);
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
