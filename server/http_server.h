#pragma once
// HttpServer: the OpenAI-compatible HTTP/1.1 front end (Boost.Beast). Keep-alive sessions on
// `io_threads` threads parse requests, submit them to a GenerationService and stream tokens back
// as SSE. Every error is caught once, at the session, and answered as OpenAI-style error JSON.
//   POST /v1/completions, /v1/chat/completions · GET /v1/models, /health, /metrics
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter (with LoRA on: server/lora_routes.h)
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/lora/lora_registry.h"
#include "engine/model/tokenizer.h"
#include "server/metrics.h"
#include "engine/grammar/grammar_constraint.h"
#include "server/request_parse.h"
#include "server/request_prepare.h"
#include "server/service.h"

namespace servelab::server {

struct ServerOptions {
  std::string host = "127.0.0.1";   ///< loopback unless told otherwise
  int port = 8000;                  ///< 0 = any free port (see HttpServer::port())
  std::string api_key;              ///< non-empty: /v1/* need `Authorization: Bearer <api_key>` (401)
  size_t max_body_bytes = 4u << 20; ///< larger bodies get 413
  int io_threads = 1;
  std::string model_name = "servelab";  ///< what /v1/models lists and responses name
  std::string chat_template;        ///< the model's template (tokenizer_config.json); "" = ChatML
  ChatRenderer render_chat;         ///< chat messages -> prompt text
  ParseLimits limits;
  /// Multi-LoRA (serve --enable-lora): the adapters a request's `model` may name; null = off.
  std::shared_ptr<LoraRegistry> loras;
  void validate() const;
};

/// Shared by every session (read-only after start, apart from the counters).
struct ServerContext {
  ServerOptions options;
  GenerationService& service;
  const Tokenizer& tokenizer;
  ServerMetrics& metrics;
  std::atomic<uint64_t> next_request_id{1};
  std::atomic<int> n_sessions{0};
  std::atomic<int> n_busy{0};  ///< sessions between reading a request and finishing its response
  std::atomic<bool> draining{false};
  /// Structured output: each constrained request's grammar, compiled against the tokenizer.
  std::unique_ptr<grammar::ConstraintCompiler> constraints;
};

class HttpServer {
 public:
  HttpServer(ServerOptions options, GenerationService& service, const Tokenizer& tokenizer, ServerMetrics& metrics);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Binds and starts the io threads; returns at once. Throws std::runtime_error when the
  /// address cannot be bound.
  void start();
  /// The bound port (after start()).
  int port() const { return bound_port_; }
  /// Stops accepting, refuses new requests (503), lets running ones finish, then stops.
  void drain();
  /// Blocks until the server has stopped (after drain() or a SIGTERM/SIGINT when
  /// handle_signals was set).
  void wait();
  /// Stops at once: open streams are cut, their requests aborted.
  void stop();
  /// start(): SIGTERM and SIGINT call drain().
  bool handle_signals = false;
  const ServerContext& context() const { return *ctx_; }

 private:
  struct Impl;
  std::unique_ptr<ServerContext> ctx_;
  std::unique_ptr<Impl> impl_;
  int bound_port_ = 0;
};

}  // namespace servelab::server
