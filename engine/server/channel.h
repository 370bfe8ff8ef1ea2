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
  /// channel was empty; it should post work to the session's executor, never block.
  void set_notify(std::function<void()> fn) {
    std::lock_guard lock(mu_);
    notify_ = std::move(fn);
  }
  /// Engine side.
  void push(std::span<const std::pair<int, TokenId>> tokens, std::optional<FinishedRequest> finished = {}) {
    std::function<void()> fn;
    {
      std::lock_guard lock(mu_);
      pending_.tokens.insert(pending_.tokens.end(), tokens.begin(), tokens.end());
      if (finished) pending_.finished = std::move(finished);
      if (!notified_) {
        notified_ = true;
        fn = notify_;
      }
    }
    if (fn) fn();
  }
  /// Session side: everything pushed since the last take.
  ChannelBatch take() {
    std::lock_guard lock(mu_);
    notified_ = false;
    return std::exchange(pending_, ChannelBatch{});
  }

 private:
  uint64_t request_id_;
  std::mutex mu_;
  ChannelBatch pending_;
  bool notified_ = false;
  std::function<void()> notify_;
};

}  // namespace servelab::server
