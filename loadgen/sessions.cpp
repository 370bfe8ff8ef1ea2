#include "loadgen/sessions.h"

#include <limits>
#include <stdexcept>
#include <string>

#include "loadgen/sources.h"

namespace servelab {

SessionSource::SessionSource(Plan plan, int max_concurrency)
    : plan_(std::move(plan)), max_concurrency_(max_concurrency) {
  if (max_concurrency < 0)
    throw std::invalid_argument("max_concurrency must be >= 0 (got " + std::to_string(max_concurrency) + ")");
  for (int i = 0; i < max_concurrency; ++i) free_slots_.insert(-std::numeric_limits<double>::infinity());
  for (size_t i = 0; i < plan_.requests.size(); ++i) {
    const PlannedRequest& r = plan_.requests[i];
    // A session's first turn (or a request outside any session) is due at its intended time.
    if (r.session < 0 || i == 0 || plan_.requests[i - 1].session != r.session) ready_.insert({r.intended_s, i});
  }
}

std::optional<double> SessionSource::next_time() const {
  if (ready_.empty()) return std::nullopt;
  if (max_concurrency_ > 0 && free_slots_.empty()) return std::nullopt;
  return ready_.begin()->first;
}

Request SessionSource::take() {
  if (ready_.empty()) throw std::logic_error("SessionSource::take: no request is due");
  const auto [due, index] = *ready_.begin();
  held_until_.reset();
  if (max_concurrency_ > 0) {
    if (free_slots_.empty()) throw std::logic_error("SessionSource::take: max_concurrency reached");
    const double slot = *free_slots_.begin();
    free_slots_.erase(free_slots_.begin());
    if (slot > due) held_until_ = slot;
  }
  ready_.erase(ready_.begin());
  const PlannedRequest& planned = plan_.requests[index];
  in_flight_[planned.id] = index;
  Request r = to_request(plan_, index);
  if (planned.session >= 0) {
    std::vector<TokenId>& conv = history_[planned.session];
    if (planned.turn > 0) r.prompt.insert(r.prompt.begin(), conv.begin(), conv.end());
    conv = r.prompt;  // the reply is appended when it finishes
  }
  return r;
}

void SessionSource::on_finished(const FinishedRequest& f, double now) {
  const auto it = in_flight_.find(f.request_id);
  if (it == in_flight_.end()) return;  // not one of ours
  const size_t index = it->second;
  in_flight_.erase(it);
  if (max_concurrency_ > 0) free_slots_.insert(now);
  const PlannedRequest& done = plan_.requests[index];
  if (done.session < 0) return;
  const bool has_next = index + 1 < plan_.requests.size() && plan_.requests[index + 1].session == done.session;
  if (!has_next) {
    history_.erase(done.session);
    return;
  }
  const bool ok = f.reason == FinishReason::length || f.reason == FinishReason::eos;
  if (!ok) {  // the conversation broke off: its later turns are never sent
    for (size_t j = index + 1; j < plan_.requests.size() && plan_.requests[j].session == done.session; ++j) ++n_skipped_;
    history_.erase(done.session);
    return;
  }
  std::vector<TokenId>& conv = history_[done.session];
  if (!f.outputs.empty()) conv.insert(conv.end(), f.outputs.front().begin(), f.outputs.front().end());
  const PlannedRequest& next = plan_.requests[index + 1];
  ready_.insert({now + next.think_time_s, index + 1});
}

}  // namespace servelab
