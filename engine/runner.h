#pragma once
// Runner: drives an Engine from a source of timed requests on a Clock (steady = real time with
// sleeps; virtual = the sim backend's predicted step times, instant). Same code for both.
#include <atomic>
#include <functional>
#include <optional>

#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/request_source.h"

namespace servelab {

struct RunnerCallbacks {
  /// sent_s: when the request was sent, the arrival handed to Engine::add: its intended time if
  /// it came due while the runner was busy, else when the runner woke for it. A request its
  /// source still works on (RequestSource::ready: a LoRA adapter being read) reaches the engine
  /// later, with this arrival, so its TTFT counts the wait.
  std::function<void(const Request&, double intended_s, double sent_s)> on_sent;
  std::function<void(const TokenEvent&)> on_token;
  std::function<void(const FinishedRequest&)> on_finished;
  std::function<void(const StepOutcome&)> on_step;
  /// Set, with on_token unset: the runner takes steps of plain decodes by Engine::step_decodes
  /// (no scheduler pass, no token events; the same run) and hands each to this instead of on_step.
  /// Its outcome holds start_s, duration_s, batch_size, n_tokens and finished only. For a caller
  /// that counts steps rather than reads them (a capacity probe).
  std::function<void(const StepOutcome&)> on_decode_step;
};

/// Runs until the source is exhausted and the engine is drained, or until `stop` is set (then
/// everything in flight is aborted and reported through on_finished).
void run_engine(Engine& engine, RequestSource& source, Clock& clock, const RunnerCallbacks& cb,
                const std::atomic<bool>* stop = nullptr);

}  // namespace servelab
