// Request sources: open loop follows the plan's times; closed loop releases a request per finish.
#include <gtest/gtest.h>

#include "loadgen/sources.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace {

using testing_util::load_yaml;

Plan small_plan(int n, uint64_t seed = 3) {
  Plan p;
  p.seed = seed;
  for (int i = 0; i < n; ++i) {
    PlannedRequest r;
    r.id = static_cast<uint64_t>(i);
    r.intended_s = 0.5 * i;
    r.prompt = std::vector<TokenId>(static_cast<size_t>(4 + i), 7);
    r.output_tokens = 10 + i;
    p.requests.push_back(r);
  }
  return p;
}

FinishedRequest finished(uint64_t id) {
  FinishedRequest f;
  f.request_id = id;
  f.reason = FinishReason::length;
  return f;
}

TEST(OpenLoopSource, FollowsIntendedTimesAndFillsSampling) {
  OpenLoopSource src(small_plan(3, 0xF0));
  for (int i = 0; i < 3; ++i) {
    ASSERT_FALSE(src.exhausted());
    ASSERT_EQ(src.next_time(), 0.5 * i);
    const Request r = src.take();
    EXPECT_EQ(r.id, static_cast<uint64_t>(i));
    EXPECT_EQ(r.prompt.size(), static_cast<size_t>(4 + i));
    EXPECT_EQ(r.sampling.max_tokens, 10 + i);
    EXPECT_TRUE(r.sampling.ignore_eos);
    EXPECT_EQ(r.sampling.seed, 0xF0u ^ static_cast<uint64_t>(i));
  }
  EXPECT_TRUE(src.exhausted());
  EXPECT_FALSE(src.next_time().has_value());
  EXPECT_THROW(src.take(), std::logic_error);
}

TEST(ClosedLoopSource, ReleasesANewRequestOnlyAfterAFinish) {
  ClosedLoopSource src(small_plan(5), 2);
  // Two users: two requests due at t = 0, then nothing until one finishes.
  ASSERT_EQ(src.next_time(), 0.0);
  EXPECT_EQ(src.take().id, 0u);
  ASSERT_EQ(src.next_time(), 0.0);
  EXPECT_EQ(src.take().id, 1u);
  EXPECT_FALSE(src.next_time().has_value());
  EXPECT_FALSE(src.exhausted());
  EXPECT_EQ(src.in_flight(), 2);
  src.on_finished(finished(1), 1.5);
  ASSERT_EQ(src.next_time(), 1.5);  // released at the finish time
  const Request r2 = src.take();
  EXPECT_EQ(r2.id, 2u);  // plan order, whichever user finished
  EXPECT_EQ(r2.sampling.max_tokens, 12);
  EXPECT_FALSE(src.next_time().has_value());
  src.on_finished(finished(0), 2.0);
  src.on_finished(finished(2), 2.5);
  ASSERT_EQ(src.next_time(), 2.0);
  EXPECT_EQ(src.take().id, 3u);
  ASSERT_EQ(src.next_time(), 2.5);
  EXPECT_EQ(src.take().id, 4u);
  EXPECT_TRUE(src.exhausted());
  EXPECT_FALSE(src.next_time().has_value());
}

TEST(Sources, MadeForTheScenarioModeAndEngineConfigMapped) {
  const Scenario s = load_yaml(
      "engine: {kv_cache_bytes: 1048576, max_model_len: 256}\n"
      "strategies:\n"
      "  - {batching: static, batch_size: 3, kv: {kind: naive, reserve: oracle}}\n"
      "workload: {concurrency: 2, n_requests: 4, prompt_tokens: 8, output_tokens: 4}\n");
  auto src = make_source(s, make_plan(s, 0));
  EXPECT_NE(dynamic_cast<ClosedLoopSource*>(src.get()), nullptr);
  const EngineConfig c = engine_config(s, s.strategies[0]);
  EXPECT_EQ(c.kv_cache_bytes, 1048576);
  EXPECT_EQ(c.sched.kind, BatchingKind::static_batch);
  EXPECT_EQ(c.sched.batch_size, 3);
  EXPECT_EQ(c.kv.kind, KvKind::naive);
  EXPECT_EQ(c.kv.reserve, NaiveReserve::oracle);
  EXPECT_EQ(c.kv.max_model_len, 256);
  EXPECT_NO_THROW(c.validate());
}

}  // namespace
}  // namespace servelab
