// Admission: "can this ever fit" ignores prefix-cache hits, a stall rejects only the request that
// cannot be placed, and continuous batching keeps a free-block watermark when admitting.
#include <gtest/gtest.h>

#include "engine/kv/paged_kv.h"
#include "engine/sched/continuous_scheduler.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace {

using namespace enginetest;

constexpr int64_t kSlotBytes = 256;  // micro model, bf16 K/V

TEST(Admission, NeverFitsCheckIgnoresPrefixCacheHits) {
  // 6 blocks. B shares A's first two blocks while A runs; it will fill 99 positions = 7 blocks,
  // more than the arena, although only 5 are new today. Cached blocks can be evicted before it
  // runs, so it must be rejected at add() and not stall the run (which took C down with it).
  for (const SchedulerConfig& sched : {continuous_sched(8, 512, false), continuous_sched(8, 512, true)}) {
    Engine engine(paged_config(sched, 6 * 16 * kSlotBytes), sim_backend());
    Request a = make_request(0, 33, 10), b = make_request(1, 40, 60), c = make_request(2, 10, 5);
    std::copy_n(a.prompt.begin(), 32, b.prompt.begin());
    RunResult r = run_virtual(engine, {{0.0, a}, {1e-9, b}, {1e-9, c}});
    ASSERT_EQ(r.finished.size(), 3u);
    EXPECT_EQ(r.at(1).reason, FinishReason::rejected);
    EXPECT_NE(r.at(1).error.find("engine.kv_cache_bytes"), std::string::npos) << r.at(1).error;
    EXPECT_TRUE(r.at(1).token_times_s.empty());
    EXPECT_EQ(r.at(0).reason, FinishReason::length) << r.at(0).error;
    EXPECT_EQ(r.at(2).reason, FinishReason::length) << r.at(2).error;
    EXPECT_EQ(r.at(2).n_output, 5);
  }
}

TEST(Admission, RejectBlockedTakesOnlyTheHeadOfTheQueue) {
  // One seat: A runs, B waits. Rejecting the blocked request takes B (and nothing else) out.
  Engine engine(paged_config(continuous_sched(1, 512, false), 1 << 20), sim_backend());
  ASSERT_FALSE(engine.add(make_request(0, 10, 4), 0.0).has_value());
  Request b = make_request(1, 12, 4);
  b.sampling.n = 1;
  ASSERT_FALSE(engine.add(b, 0.0).has_value());
  engine.step(0.0);
  const auto rejected = engine.reject_blocked(0.5, "cannot be placed");
  ASSERT_TRUE(rejected.has_value());
  EXPECT_EQ(rejected->request_id, 1u);
  EXPECT_EQ(rejected->reason, FinishReason::rejected);
  EXPECT_EQ(rejected->error, "cannot be placed");
  EXPECT_DOUBLE_EQ(rejected->end_s, 0.5);
  EXPECT_FALSE(engine.reject_blocked(0.5, "again").has_value());  // A runs: nothing waits
  engine.check_invariants();
  int finished = 0;
  for (double t = 1.0; engine.has_work(); t += 1.0)
    for (const FinishedRequest& f : engine.step(t).finished) {
      EXPECT_EQ(f.request_id, 0u);
      EXPECT_EQ(f.n_output, 4);
      ++finished;
    }
  EXPECT_EQ(finished, 1);
}

TEST(Admission, ContinuousKeepsAFreeWatermarkWhenOthersRun) {
  // 100 blocks of 16: the watermark is 1% = 16 slots. A holds 97 blocks; B's prompt needs the
  // last 3. Admitting B would leave nothing for A's next block, so B waits.
  KvConfig kc;
  kc.kind = KvKind::paged;
  kc.block_size = 16;
  kc.prefix_caching = false;
  PagedKvManager kv(kc, 1600);
  ContinuousScheduler sched(continuous_sched(8, 4096, false), kv);
  Sequence a, b;
  a.id = a.request_id = 1;
  a.tokens = prompt_tokens(97 * 16, 1);
  a.n_prompt = a.n_tokens();
  a.sampling.max_tokens = 50;
  b.id = b.request_id = 2;
  b.tokens = prompt_tokens(48, 2);
  b.n_prompt = 48;
  b.sampling.max_tokens = 4;
  sched.add(&a);
  ScheduledStep first = sched.schedule(0.0);
  ASSERT_EQ(first.chunks.size(), 1u);
  a.n_computed = a.n_tokens();
  a.tokens.push_back(5);  // A sampled its first token
  sched.add(&b);
  const ScheduledStep next = sched.schedule(1.0);
  ASSERT_EQ(next.chunks.size(), 1u);
  EXPECT_EQ(next.chunks[0].seq, &a) << "B was admitted into the watermark";
  EXPECT_FALSE(b.kv.allocated);
  EXPECT_EQ(kv.free_slots(), 2 * 16);  // A's decode took a fourth-to-last block; B still waits
  EXPECT_EQ(sched.n_waiting(), 1);
}

}  // namespace
}  // namespace servelab
