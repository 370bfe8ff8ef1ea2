// RequestChannel: once a session has called set_notify(nullptr), the engine thread neither calls
// the old notify nor holds a copy of it (that copy holds the session's strand executor; destroyed
// on the engine thread after the server's io_context was gone, it was a use of a destroyed mutex
// under TSan in ServerE2e).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "engine/server/channel.h"

namespace servelab::server::test {
namespace {

TEST(RequestChannel, SetNotifyNullWaitsForARunningNotifyAndReleasesIt) {
  RequestChannel ch(1);
  auto token = std::make_shared<int>(1);  // stands in for the strand executor the notify captures
  std::weak_ptr<int> weak = token;
  std::atomic<bool> entered{false}, detached{false};
  std::atomic<bool> expired_when_detached{false};
  // The notify stays inside until the session's set_notify(nullptr) has returned (it cannot while
  // the notify runs), or for a bounded number of yields.
  ch.set_notify([token, &entered, &detached] {
    entered = true;
    for (int i = 0; i < 200000 && !detached.load(); ++i) std::this_thread::yield();
  });
  token.reset();
  const std::pair<int, TokenId> tok{0, 5};
  std::thread engine([&] { ch.push(std::span(&tok, 1)); });
  while (!entered.load()) std::this_thread::yield();
  std::thread session([&] {
    ch.set_notify(nullptr);
    expired_when_detached = weak.expired();
    detached = true;
  });
  session.join();
  engine.join();
  // Once set_notify(nullptr) returned, no copy of the old notify was left on the engine thread.
  EXPECT_TRUE(expired_when_detached.load());
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
