#pragma once
// RequestChannel: how the engine thread hands one request's tokens to its HTTP session (STYLE
// item 4). The engine thread pushes; the session takes everything pending when notified.
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace servelab::server {

/// What a session takes from its channel at once.
struct ChannelBatch {
  std::vector<std::pair<int, TokenId>> tokens;  ///< (sample index, token) in generation order
  std::optional<FinishedRequest> finished;      ///< set once, after the request's last token
};

class RequestChannel {
 public:
  explicit RequestChannel(uint64_t request_id) : request_id_(request_id) {}
  uint64_t request_id() const { return request_id_; }

  /// Session side, before submitting: called (on the engine thread) when data arrives and the
  /// channel was empty; it should post work to the session's executor, never block. Returns once
  /// a call of the previous function that was under way has returned; the previous function is
  /// destroyed here, on the caller's thread. So after set_notify(nullptr) the engine thread
  /// neither posts to the session's executor nor holds a copy of it (a copy destroyed on the
  /// engine thread after the io_context was gone was a use of a destroyed mutex under TSan).
  void set_notify(std::function<void()> fn) {
    std::function<void()> old;
    {
      std::lock_guard call(call_mu_);
      old = std::exchange(notify_, std::move(fn));
    }
  }
  /// Engine side.
  void push(std::span<const std::pair<int, TokenId>> tokens, std::optional<FinishedRequest> finished = {}) {
    bool notify = false;
    {
      std::lock_guard lock(mu_);
      pending_.tokens.insert(pending_.tokens.end(), tokens.begin(), tokens.end());
      if (finished) pending_.finished = std::move(finished);
      notify = !std::exchange(notified_, true);
    }
    if (notify) {
      std::lock_guard call(call_mu_);
      if (notify_) notify_();
    }
  }
  /// Session side: everything pushed since the last take.
  ChannelBatch take() {
    std::lock_guard lock(mu_);
    notified_ = false;
    return std::exchange(pending_, ChannelBatch{});
  }

 private:
  uint64_t request_id_;
  std::mutex mu_;  ///< guards pending_ and notified_
  ChannelBatch pending_;
  bool notified_ = false;
  std::mutex call_mu_;  ///< guards notify_, held while it runs (not mu_: take() never waits for a post)
  std::function<void()> notify_;
};

}  // namespace servelab::server
