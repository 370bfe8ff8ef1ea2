#pragma once
// Talking to the server outside the load: one blocking request at a time. Before a run, one
// request checks the endpoint (a run against a wrong URL stops with the server's answer instead of
// recording N failures) and the server is named (its /v1/models, the engine its /metrics speak
// for); during a run, its /metrics are scraped (server_metrics.h).
#include <map>
#include <string>
#include <vector>

#include "loadgen/target.h"

namespace servelab::http_load {

/// One HTTP exchange's outcome: status 0 when no response came (`error` says why).
struct HttpReply {
  int status = 0;
  std::string body;
  std::string error;  ///< "connect: Connection refused", "timeout after 5 s", ...
};

/// A blocking GET or POST (body non-empty) of `path` on `endpoint`, with `headers`, reading the
/// whole response (at most 16 MiB) within `timeout_s`.
HttpReply http_exchange(const Endpoint& endpoint, const std::string& path, const std::string& body,
                        const std::map<std::string, std::string>& headers, double timeout_s);

/// The message of an OpenAI-style error body ({"error": {"message"}}, {"message"}, {"detail"}),
/// else the body's start on one line.
std::string server_error_message(const std::string& body);

/// Sends `body` (one planned request, streamed) to every endpoint of `target`. Returns "" when
/// each answered 200 with a stream, else what went wrong, with the server's own answer:
/// "POST http://h:8000/v1/completions: HTTP 404: Not Found".
std::string preflight(const TargetSpec& target, const std::string& body);

/// What the server under test says about itself.
struct ServerInfo {
  std::vector<std::string> models;  ///< ids from GET /v1/models (empty when it has none)
  std::string owned_by;             ///< its first model's owned_by ("vllm", "sglang", "servelab", ...)
  std::string engine;               ///< from /metrics' names: servelab, vLLM, SGLang, TGI, llama.cpp; "" = unknown
  bool has_metrics = false;         ///< GET /metrics answered 200
};

/// GET /v1/models and /metrics of the first endpoint (short timeouts; failures leave fields empty).
ServerInfo describe_server(const TargetSpec& target);

/// The engine a Prometheus text's metric names belong to: "servelab", "vLLM", "SGLang", "TGI",
/// "llama.cpp", or "".
std::string metrics_engine(const std::string& prometheus_text);

/// "vLLM at http://h:8000 serving Qwen/Qwen3-0.6B": the server as reports name it.
std::string server_description(const ServerInfo& info, const TargetSpec& target);

}  // namespace servelab::http_load
