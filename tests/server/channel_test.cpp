// RequestChannel: once a session has called set_notify(nullptr), the engine thread neither calls
// the old notify nor holds a copy of it (that copy holds the session's strand executor; destroyed
// on the engine thread after the server's io_context was gone, it was a use of a destroyed mutex
// under TSan in ServerE2e).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <thread>

#include "engine/backend/step_input.h"
#include "server/channel.h"

namespace servelab::server::test {
namespace {

TEST(RequestChannel, SetNotifyNullWaitsForARunningNotifyAndReleasesIt) {
  RequestChannel ch(1);
  auto token = std::make_shared<int>(1);  // stands in for the strand executor the notify captures
  std::weak_ptr<int> weak = token;
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, detached = false;
  bool expired_when_detached = false;
  // The notify stays inside until the session's set_notify(nullptr) has returned (it cannot while
  // the notify runs, so with the fix this wait runs out: a bound, not an ordering by time).
  ch.set_notify([token, &mu, &cv, &entered, &detached] {
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return detached; });
  });
  token.reset();
  const std::pair<int, TokenId> tok{0, 5};
  std::thread engine([&] { ch.push(std::span(&tok, 1)); });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return entered; });
  }
  std::thread session([&] {
    ch.set_notify(nullptr);
    std::lock_guard lock(mu);
    expired_when_detached = weak.expired();
    detached = true;
    cv.notify_all();
  });
  session.join();
  engine.join();
  // Once set_notify(nullptr) returned, no copy of the old notify was left on the engine thread.
  EXPECT_TRUE(expired_when_detached);
  ChannelBatch b = ch.take();
  ASSERT_EQ(b.tokens.size(), 1u);
  EXPECT_EQ(b.tokens[0].second, 5);
}

TEST(RequestChannel, NotifiesOncePerTake) {
  RequestChannel ch(7);
  int calls = 0;
  ch.set_notify([&] { ++calls; });
  const std::pair<int, TokenId> tok{0, 1};
  ch.push(std::span(&tok, 1));
  ch.push(std::span(&tok, 1));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ch.take().tokens.size(), 2u);
  FinishedRequest f;
  f.request_id = 7;
  ch.push({}, f);
  EXPECT_EQ(calls, 2);
  ChannelBatch b = ch.take();
  EXPECT_TRUE(b.tokens.empty());
  ASSERT_TRUE(b.finished.has_value());
  EXPECT_EQ(b.finished->request_id, 7u);
}

}  // namespace
}  // namespace servelab::server::test
