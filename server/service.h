#pragma once
// GenerationService: what the HTTP layer submits requests to. EngineService runs the reference
// engine on its own thread; EchoService answers at once without a model (the fast responder the
// load-generator benchmark measures against).
#include <memory>
#include <string>

#include "engine/model/config.h"
#include "server/channel.h"
#include "server/metrics.h"

namespace servelab::server {

class GenerationService {
 public:
  virtual ~GenerationService() = default;
  /// Queues a request whose prompt is already checked against max_model_len(). Its tokens and
  /// its end arrive on `channel` (set_notify before calling). Throws ApiError 429 (waiting queue
  /// full, with retry_after_s()) or 503 (draining).
  virtual void submit(const Request& request, std::shared_ptr<RequestChannel> channel) = 0;
  /// The client went away or a stop string ended it: frees its KV now. Its channel still
  /// receives the aborted record. Unknown or finished ids are ignored.
  virtual void abort(uint64_t request_id) = 0;
  /// Every sample matched a stop string: like abort, but counted as finished with "stop".
  virtual void finish_early(uint64_t request_id) { abort(request_id); }
  /// Refuses new requests from now on (503).
  virtual void start_draining() = 0;
  /// Requests submitted and not finished.
  virtual int n_in_flight() const = 0;
  virtual const ModelConfig& model() const = 0;
  virtual int max_model_len() const = 0;
  /// Seconds a 429'd client should wait (Retry-After).
  virtual int retry_after_s() const { return 1; }
  /// Engine invariants and a free KV arena when idle (tests); throws std::logic_error.
  virtual void check_idle_clean() const {}
};

}  // namespace servelab::server
