// Engine::abort (added for the server: a client that goes away frees its KV at once).
#include <gtest/gtest.h>

#include "tests/server/server_test_util.h"

namespace servelab::server::test {
namespace {

Request req(uint64_t id, int n_prompt, int max_tokens, int n = 1) {
  Request r;
  r.id = id;
  for (int i = 0; i < n_prompt; ++i) r.prompt.push_back(2 + (i * 7 + id) % 200);
  r.sampling.max_tokens = max_tokens;
  r.sampling.n = n;
  return r;
}

TEST(EngineAbort, FreesKvOfRunningWaitingAndForkedRequests) {
  Engine engine(tiny_engine_config(3), tiny_backend());
  const int64_t cap = engine.kv().capacity_slots();
  ASSERT_FALSE(engine.add(req(1, 40, 50), 0.0));
  ASSERT_FALSE(engine.add(req(2, 30, 50, 2), 0.0));  // parallel samples share blocks
  ASSERT_FALSE(engine.add(req(3, 20, 50), 0.0));     // waits: max_num_seqs 3 are taken
  for (int i = 0; i < 4; ++i) engine.step(0.0);
  engine.check_invariants();
  EXPECT_LT(engine.kv().free_slots(), cap);

  auto f2 = engine.abort(2, 1.0, "client disconnected");
  ASSERT_TRUE(f2);
  EXPECT_EQ(f2->reason, FinishReason::aborted);
  EXPECT_EQ(f2->error, "client disconnected");
  EXPECT_GT(f2->n_output, 0);
  engine.check_invariants();
  EXPECT_FALSE(engine.abort(2, 1.0, "again"));  // gone
  ASSERT_TRUE(engine.abort(3, 1.0, "waiting one"));
  ASSERT_TRUE(engine.abort(1, 1.0, "running one"));
  EXPECT_FALSE(engine.has_work());
  engine.check_invariants();
  EXPECT_EQ(engine.kv().free_slots(), cap);
  // The engine keeps serving afterwards.
  ASSERT_FALSE(engine.add(req(4, 10, 3), 2.0));
  int finished = 0;
  for (int i = 0; i < 10 && engine.has_work(); ++i) finished += static_cast<int>(engine.step(2.0).finished.size());
  EXPECT_EQ(finished, 1);
  EXPECT_EQ(engine.kv().free_slots(), cap);
}

}  // namespace
}  // namespace servelab::server::test
