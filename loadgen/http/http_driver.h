#pragma once
// HTTP driver: sends a run's requests to OpenAI-compatible servers at their planned times and
// turns each streamed response into a RequestRecord: one asynchronous Beast client on one
// thread, pooled keep-alive connections per replica, a timestamp per received chunk, token
// counts from usage (else counted chunks), a per-request timeout, and every failure recorded
// with its HTTP status and reason (never dropped).
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/request_source.h"
#include "loadgen/record_sinks.h"
#include "loadgen/structured_output.h"
#include "loadgen/target.h"

namespace servelab::http_load {

struct HttpDriverOptions {
  TargetSpec target;
  const Tokenizer* tokenizer = nullptr;  ///< text prompts (target.tokenizer loaded); nullptr = ids / words
  /// Structured output: the schema each request carries (response_format), whose output text the
  /// record then keeps; nullptr = none.
  const StructuredRequests* structured = nullptr;
};

/// How much of the run each replica took.
struct ReplicaShare {
  std::string url;
  int n_sent = 0;
  int n_ok = 0;
  int n_failed = 0;
};

struct HttpDriveStats {
  DriveStats stats;
  std::vector<ReplicaShare> replicas;
};

/// Runs one strategy × rate over HTTP: each request of `source` is sent at its intended time
/// (closed-loop sources release the next on each finish); records go to sinks.on_record as they
/// finish. Statuses: ok; rejected (HTTP 429/503); aborted (stop flag); error (anything else, with
/// "HTTP 500: message", "connect: Connection refused", "timeout after 5 s", "malformed chunk: ...").
/// Throws std::invalid_argument for a bad target URL.
HttpDriveStats drive_http(RequestSource& source, const HttpDriverOptions& options, const std::string& run_label,
                          const RecordSinks& sinks, const std::function<bool(uint64_t)>& is_warmup = {},
                          const std::atomic<bool>* stop = nullptr);

}  // namespace servelab::http_load
