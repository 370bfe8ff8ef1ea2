#pragma once
// Where a run's requests come from: the in-process runner (engine/runner.h) and the HTTP driver
// (loadgen/http) take them from the same source, which needs no engine to be linked.
#include <optional>

#include "engine/finished_request.h"
#include "engine/request.h"

namespace servelab {

/// Where requests come from. Open-loop sources know every arrival time in advance; closed-loop
/// ones (concurrency N) release the next request when one finishes.
class RequestSource {
 public:
  virtual ~RequestSource() = default;
  /// Intended send time of the next request, or nullopt when none is due until one finishes.
  virtual std::optional<double> next_time() const = 0;
  virtual Request take() = 0;          ///< the request at next_time()
  virtual bool exhausted() const = 0;  ///< no request will ever come again
  virtual void on_finished(const FinishedRequest& r, double now) {}
  /// For the request last taken: when the source let it go, if it held it past its intended
  /// time (a concurrency cap waiting for a free slot); nullopt when it went out when due.
  virtual std::optional<double> held_until() const { return std::nullopt; }
  /// For a request taken and not yet finished: whether what it waits on is done. A source may
  /// hand out a request whose front end still works on it (LoraSource: its adapter being read on
  /// a worker thread, as a server's HTTP session reads one before handing the request over); the
  /// runner holds it back meanwhile, the engine going on with the rest. Default: always ready.
  virtual bool ready(const Request& r) const {
    (void)r;
    return true;
  }
  /// When a request taken will be ready on the run's clock, where the source prices its front
  /// end's work rather than doing it (the sim: LoraSource's adapter reads on a virtual clock);
  /// nullopt: ready() tells.
  virtual std::optional<double> ready_at(const Request& r) const {
    (void)r;
    return std::nullopt;
  }
  /// Completes a request taken (sets what it waited on), blocking until ready(r).
  virtual void finish(Request& r) { (void)r; }
};

}  // namespace servelab
