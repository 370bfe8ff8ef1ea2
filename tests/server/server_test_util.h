#pragma once
// Test support for the server: a tokenizer whose text names every id ("<17>"), a server on an
// ephemeral loopback port over the tiny CPU engine, and a blocking HTTP client.
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "engine/backend/make_backend.h"
#include "engine/model/tokenizer.h"
#include "server/engine_service.h"
#include "server/http_server.h"

namespace servelab::server::test {

/// Encodes bytes as ids 0..255; decodes every id as "<id>", so a response's text gives back
/// exactly the ids that made it. Test-local: the real tokenizers live in engine/model.
class IdTokenizer final : public Tokenizer {
 public:
  explicit IdTokenizer(int vocab) : vocab_(vocab) {}
  std::string name() const override { return "ids"; }
  std::vector<TokenId> encode(std::string_view text, bool) const override {
    std::vector<TokenId> out;
    for (unsigned char c : text) out.push_back(c);
    return out;
  }
  std::string decode(std::span<const TokenId> ids, bool) const override {
    std::string s;
    for (TokenId t : ids) s += "<" + std::to_string(t) + ">";
    return s;
  }
  int vocab_size() const override { return vocab_; }
  std::optional<TokenId> token_id(std::string_view) const override { return std::nullopt; }
  std::optional<TokenId> eos_id() const override { return std::nullopt; }
  std::optional<TokenId> bos_id() const override { return std::nullopt; }

 private:
  int vocab_;
};

/// Ids back from an IdTokenizer text.
inline std::vector<TokenId> ids_of(const std::string& text) {
  std::vector<TokenId> out;
  for (size_t i = text.find('<'); i != std::string::npos; i = text.find('<', i + 1))
    out.push_back(std::stoi(text.substr(i + 1)));
  return out;
}

/// The tiny model on the CPU backend: continuous batching, paged KV.
inline EngineConfig tiny_engine_config(int max_num_seqs = 8) {
  EngineConfig c;
  c.sched.kind = BatchingKind::continuous;
  c.sched.max_num_seqs = max_num_seqs;
  c.sched.max_num_batched_tokens = 1024;
  c.kv.kind = KvKind::paged;
  c.kv.max_model_len = 512;
  c.kv_cache_bytes = 8ll << 20;
  return c;
}

inline std::unique_ptr<Backend> tiny_backend(uint64_t seed = 7) {
  BackendSpec spec;
  spec.kind = BackendKind::cpu;
  spec.model = "tiny";
  spec.seed = seed;
  spec.threads = 1;
  return make_backend(spec);
}

/// A server on 127.0.0.1:<ephemeral> over the tiny CPU engine.
struct TestServer {
  explicit TestServer(EngineServiceOptions so = {}, ServerOptions o = {}, EngineConfig ec = tiny_engine_config(),
                      uint64_t seed = 7)
      : metrics("tiny") {
    auto engine = std::make_unique<Engine>(ec, tiny_backend(seed));
    tokenizer = std::make_unique<IdTokenizer>(engine->backend().config().vocab_size);
    service = std::make_unique<EngineService>(std::move(engine), metrics, so);
    o.port = 0;
    o.model_name = "tiny";
    o.render_chat = [](std::span<const ChatMessage> m, const std::string&) {
      std::string s;
      for (const auto& x : m) s += x.role + ": " + x.content + "\n";
      return s + "assistant: ";
    };
    server = std::make_unique<HttpServer>(o, *service, *tokenizer, metrics);
    server->start();
    port = server->port();
  }
  ~TestServer() { server.reset(); }
  /// Blocks until no request is in flight (bounded: fails the test after 60 s).
  bool wait_idle() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (service->n_in_flight() > 0 || server->context().n_busy.load() > 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  ServerMetrics metrics;
  std::unique_ptr<IdTokenizer> tokenizer;
  std::unique_ptr<EngineService> service;
  std::unique_ptr<HttpServer> server;
  int port = 0;
};

struct HttpReply {
  int status = 0;
  std::string body;   ///< chunked encoding already removed
  boost::beast::http::response<boost::beast::http::string_body> raw;
};

/// One request on a fresh connection (Connection: close).
inline HttpReply http_call(int port, boost::beast::http::verb method, const std::string& target,
                           const std::string& body = "", const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  namespace http = boost::beast::http;
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket sock(ioc);
  sock.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.keep_alive(false);
  req.body() = body;
  req.prepare_payload();
  http::write(sock, req);
  boost::beast::flat_buffer buf;
  HttpReply r;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http::read(sock, buf, parser);
  r.raw = parser.release();
  r.status = r.raw.result_int();
  r.body = r.raw.body();
  return r;
}

inline HttpReply post(int port, const std::string& target, const std::string& body,
                      const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  return http_call(port, boost::beast::http::verb::post, target, body, headers);
}
inline HttpReply get(int port, const std::string& target) {
  return http_call(port, boost::beast::http::verb::get, target);
}

}  // namespace servelab::server::test
