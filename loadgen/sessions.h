#pragma once
// Multi-turn sessions: a conversation's turns, each carrying every earlier turn's prompt and
// reply in front of its own new tokens, sent a think time after the previous reply finished.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "engine/runner.h"
#include "loadgen/plan.h"

namespace servelab {

/// The source for a plan with sessions (PlannedRequest::session >= 0; the turns of a session are
/// consecutive in the plan). Turn 0 of each session is due at its intended time (the session's
/// arrival, by the arrival process: open loop across sessions); turn k+1 is due think_time_s after
/// turn k finished (closed loop within a session), and its prompt is turn k's prompt, then turn
/// k's reply (the generated token ids), then turn k+1's own tokens: a prefix shared with every
/// earlier turn, as a chat client resends the conversation. A turn that fails (rejected, aborted)
/// ends its session; the turns after it are never sent (n_turns_skipped).
///
/// max_concurrency > 0 caps requests in flight as OpenLoopSource does (held_until reports the wait).
/// The runner must call on_finished for every request it took.
class SessionSource final : public RequestSource {
 public:
  explicit SessionSource(Plan plan, int max_concurrency = 0);
  std::optional<double> next_time() const override;
  Request take() override;
  bool exhausted() const override { return ready_.empty() && in_flight_.empty(); }
  void on_finished(const FinishedRequest& r, double now) override;
  std::optional<double> held_until() const override { return held_until_; }
  const Plan& plan() const { return plan_; }
  int n_in_flight() const { return static_cast<int>(in_flight_.size()); }
  int n_turns_skipped() const { return n_skipped_; }

 private:
  Plan plan_;
  int max_concurrency_ = 0;
  std::set<std::pair<double, size_t>> ready_;          ///< (due time, plan index), earliest first
  std::map<uint64_t, size_t> in_flight_;               ///< request id → plan index
  std::map<int, std::vector<TokenId>> history_;        ///< session → its conversation so far
  std::multiset<double> free_slots_;
  std::optional<double> held_until_;
  int n_skipped_ = 0;
};

}  // namespace servelab
