// The run loop: admit what has come due, step the engine, move the clock, deliver callbacks;
// when nothing can run, sleep until the next arrival or policy timer.
#include "engine/runner.h"

#include <algorithm>
#include <string>
#include <utility>

namespace servelab {

namespace {

/// Longest single sleep on a steady clock when a stop flag is watched, so Ctrl-C is prompt.
constexpr double kStopPollS = 0.05;
/// How often a runner with nothing to run looks again at requests its source still works on.
constexpr double kHeldPollS = 0.0005;
/// Consecutive steps that only preempted (ran nothing) before the run counts as stalled.
constexpr int kMaxEmptyPreemptSteps = 1000;

}  // namespace

void run_engine(Engine& engine, RequestSource& source, Clock& clock, const RunnerCallbacks& cb,
                const std::atomic<bool>* stop) {
  auto deliver = [&](const FinishedRequest& f) {
    if (cb.on_finished) cb.on_finished(f);
    source.on_finished(f, clock.now());
  };
  // Requests taken whose source still works on them (RequestSource::ready): they go to the
  // engine when ready, with the arrival they were taken at, in the order they become ready.
  struct Held {
    Request request;
    double arrival = 0.0;
    std::optional<double> at;  // RequestSource::ready_at
  };
  std::vector<Held> held;
  auto admit = [&](Request r, double arrival) {
    if (auto rejected = engine.add(std::move(r), arrival)) deliver(*rejected);  // its prompt moves in
  };
  auto admit_ready = [&] {
    std::erase_if(held, [&](Held& h) {
      if (!source.ready(h.request) || (h.at && *h.at > clock.now())) return false;
      source.finish(h.request);
      admit(std::move(h.request), h.arrival);
      return true;
    });
  };
  auto abort_everything = [&](const std::string& why) {
    for (Held& h : held) {  // never reached the engine
      FinishedRequest f;
      f.request_id = h.request.id;
      f.reason = FinishReason::aborted;
      f.error = why.empty() ? "aborted before it finished (run stopped)" : why;
      f.arrival_s = h.arrival;
      f.end_s = clock.now();
      f.n_prompt = int(h.request.prompt.size());
      deliver(f);
    }
    held.clear();
    for (FinishedRequest& f : engine.abort_all(clock.now())) {
      if (!why.empty()) f.error = why;
      deliver(f);
    }
  };
  // A stall is the head of the queue's doing: only it leaves, the rest stays in flight.
  auto reject_blocked = [&](const std::string& why) {
    if (auto f = engine.reject_blocked(clock.now(), why)) deliver(*f);
    else abort_everything(why);
  };
  auto stopped = [&] { return stop && stop->load(); };

  const bool decode_steps = cb.on_decode_step && !cb.on_token;
  StepOutcome decoded;  // Engine::step_decodes' outcome, reused
  int empty_preempt_steps = 0;
  double woke_at = clock.now();  // when the runner last came back from sleeping
  while (true) {
    if (stopped()) {
      abort_everything("");
      return;
    }
    // Everything that has come due goes in, in plan order. A request that came due while the
    // runner was busy (stepping the engine, delivering callbacks) arrived at its intended time:
    // a server would have queued it then, so policy timers count from there (Triton semantics).
    // One that came due while the runner slept arrives when it woke (the load generator's lateness).
    // A request its source still works on waits in `held`, until ready() or its ready_at() (on
    // a virtual clock, which cannot move while a thread works, ready() is waited for here).
    for (auto t = source.next_time(); t && *t <= clock.now(); t = source.next_time()) {
      Request r = source.take();
      const double arrival = *t >= woke_at ? *t : clock.now();
      if (cb.on_sent) cb.on_sent(r, *t, arrival);
      const std::optional<double> at = source.ready_at(r);
      if ((!source.ready(r) && !clock.is_virtual()) || (at && *at > clock.now())) {
        held.push_back({std::move(r), arrival, at});
        continue;
      }
      source.finish(r);
      admit(std::move(r), arrival);
    }
    admit_ready();

    bool stalled = false;
    if (engine.has_work()) {
      const double step_at = clock.now();
      if (decode_steps && engine.step_decodes(step_at, decoded)) {  // as a non-idle step below
        empty_preempt_steps = 0;
        clock.advance(decoded.duration_s);
        cb.on_decode_step(decoded);
        for (const FinishedRequest& f : decoded.finished) deliver(f);
        continue;
      }
      StepOutcome s = engine.step(step_at);
      if (!s.idle()) {
        empty_preempt_steps = 0;
        clock.advance(s.duration_s);
        if (cb.on_step) cb.on_step(s);
        if (cb.on_token)
          for (const TokenEvent& t : s.tokens) cb.on_token(t);
        for (const FinishedRequest& f : s.finished) deliver(f);
        continue;
      }
      if (!s.preempted.empty()) {  // a step may only make room; the next one runs
        if (++empty_preempt_steps < kMaxEmptyPreemptSteps) continue;
        empty_preempt_steps = 0;
        reject_blocked("the engine kept preempting without running anything while this request waited "
                       "(KV arena too small?)");
        continue;
      }
      // Idle with work queued is fine while a policy timer is pending; a timer that was already
      // due at this step, or none at all with nothing left to arrive, means no step ever will.
      const auto timer = engine.next_wakeup();
      stalled = held.empty() && (timer ? *timer <= step_at : !source.next_time());
    } else if (source.exhausted() && held.empty()) {
      return;
    }
    if (stalled) {
      reject_blocked("the engine could not schedule this request (does it fit in the KV arena?)");
      continue;
    }

    // Nothing runnable: sleep until the next arrival or the policy's timer.
    std::optional<double> wake = source.next_time();
    if (auto w = engine.next_wakeup()) wake = wake ? std::min(*wake, *w) : *w;
    for (const Held& h : held) {  // its ready time, or a look again soon
      const double w = h.at ? *h.at : clock.now() + kHeldPollS;
      wake = wake ? std::min(*wake, w) : w;
    }
    if (!wake) return;  // no work, and a source that waits on finishes that will never come
    if (stop && !clock.is_virtual()) {
      clock.sleep_until(std::min(*wake, clock.now() + kStopPollS));
    } else {
      clock.sleep_until(*wake);
    }
    woke_at = clock.now();
  }
}

}  // namespace servelab
