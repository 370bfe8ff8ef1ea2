#include "server/http_session.h"

#include <ctime>

#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/lora_routes.h"
#include "server/request_prepare.h"

namespace servelab::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
  }
  return "Unknown";
}

bool is_disconnect(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::operation_aborted || ec == asio::error::broken_pipe || ec == asio::error::bad_descriptor;
}

}  // namespace

HttpSession::HttpSession(asio::ip::tcp::socket socket, ServerContext& ctx) : socket_(std::move(socket)), ctx_(ctx) {
  ++ctx_.n_sessions;
}

HttpSession::~HttpSession() {
  if (channel_) channel_->set_notify(nullptr);  // the engine thread must not post to a gone session
  if (generating_) ctx_.service.abort(request_id_);
  if (busy_) --ctx_.n_busy;
  --ctx_.n_sessions;
}

void HttpSession::start() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->read_request(); });
}

void HttpSession::close() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->client_gone(); });
}

void HttpSession::read_request() {
  if (closed_) return;
  parser_.emplace();
  parser_->body_limit(ctx_.options.max_body_bytes);
  parser_->header_limit(64 * 1024);
  http::async_read(socket_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
}

void HttpSession::on_read(beast::error_code ec) {
  if (closed_) return;
  if (ec) {
    if (is_disconnect(ec)) return client_gone();
    keep_alive_ = false;
    set_busy(true);
    if (ec == http::error::body_limit) {
      ctx_.metrics.on_rejected("body_too_large");
      return respond_error(ApiError(413, "invalid_request_error", "", "body_too_large",
                                    "the request body exceeds " + std::to_string(ctx_.options.max_body_bytes) + " bytes"));
    }
    ctx_.metrics.on_rejected("invalid");
    return respond_error(ApiError(400, "invalid_request_error", "", "bad_http", "malformed HTTP request: " + ec.message()));
  }
  Request req = parser_->release();
  keep_alive_ = req.keep_alive();
  set_busy(true);
  handle(req);
}

void HttpSession::set_busy(bool busy) {
  if (busy == busy_) return;
  busy_ = busy;
  if (busy) ++ctx_.n_busy;
  else --ctx_.n_busy;
}

void HttpSession::handle(Request& req) {
  // The one place errors become responses.
  try {
    route(req);
  } catch (const ApiError& e) {
    std::string extra;
    if (e.status == 429) extra = "Retry-After: " + std::to_string(ctx_.service.retry_after_s()) + "\r\n";
    if (e.status == 401) extra = "WWW-Authenticate: Bearer\r\n";
    respond_error(e, extra);
  } catch (const std::exception& e) {
    respond_error(ApiError(500, "server_error", "", "internal_error", std::string("internal error: ") + e.what()));
  }
}

void HttpSession::route(Request& req) {
  std::string target(req.target());
  if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
  const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
  const bool post = req.method() == http::verb::post;
  auto wrong_method = [&](const char* allowed) {
    return ApiError(405, "invalid_request_error", "", "method_not_allowed",
                    std::string("method ") + std::string(req.method_string()) + " not allowed on " + target + " (use " +
                        allowed + ")");
  };
  if (target.rfind("/v1/", 0) == 0 && !ctx_.options.api_key.empty()) {
    const auto auth = req[http::field::authorization];
    if (auth != "Bearer " + ctx_.options.api_key) {
      ctx_.metrics.on_rejected("unauthorized");
      throw ApiError(401, "authentication_error", "", "invalid_api_key",
                     auth.empty() ? "missing Authorization: Bearer <api key>" : "invalid API key");
    }
  }
  if (target == "/health") {
    if (!get) throw wrong_method("GET");
    if (ctx_.draining) throw ApiError(503, "server_error", "", "draining", "the server is shutting down");
    return respond(200, "", "text/plain");
  }
  if (target == "/metrics") {
    if (!get) throw wrong_method("GET");
    return respond(200, ctx_.metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  }
  if (target == "/v1/models") {
    if (!get) throw wrong_method("GET");
    nlohmann::json m = {{"id", ctx_.options.model_name}, {"object", "model"}, {"created", 0},
                        {"owned_by", "servelab"}, {"max_model_len", ctx_.service.max_model_len()}};
    nlohmann::json j = {{"object", "list"}, {"data", nlohmann::json::array({m})}};
    if (ctx_.options.loras)
      for (auto& card : lora_model_cards(*ctx_.options.loras, ctx_.options.model_name, ctx_.service.max_model_len()))
        j["data"].push_back(std::move(card));
    return respond(200, j.dump());
  }
  if (target == "/v1/load_lora_adapter" || target == "/v1/unload_lora_adapter") {
    if (!post) throw wrong_method("POST");
    const std::string body(req.body());
    return respond(200, target == "/v1/load_lora_adapter"
                            ? load_lora_adapter(ctx_.options.loras.get(), ctx_.options.model_name, body)
                            : unload_lora_adapter(ctx_.options.loras.get(), body),
                   "text/plain");
  }
  if (target == "/v1/completions" || target == "/v1/chat/completions") {
    if (!post) throw wrong_method("POST");
    return start_completion(req, target == "/v1/completions" ? ApiKind::completions : ApiKind::chat);
  }
  throw ApiError(404, "invalid_request_error", "", "not_found", "no route for " + target);
}

void HttpSession::start_completion(Request& req, ApiKind api) {
  CompletionParams params;
  PreparedRequest prepared;
  const uint64_t id = ctx_.next_request_id++;
  try {
    params = parse_completion_request(req.body(), api, ctx_.options.limits);
    ModelLimits lim;
    lim.vocab_size = ctx_.service.model().vocab_size;
    lim.max_model_len = ctx_.service.max_model_len();
    lim.model_name = ctx_.options.model_name;
    lim.chat_template = ctx_.options.chat_template;
    lim.render_chat = ctx_.options.render_chat;
    lim.constraints = ctx_.constraints.get();
    lim.loras = ctx_.options.loras.get();
    prepared = prepare_request(params, id, ctx_.tokenizer, lim);
  } catch (const ApiError& e) {
    ctx_.metrics.on_rejected(e.code == "context_length_exceeded" ? "too_long" : "invalid");
    throw;
  }
  stream_ = std::make_unique<CompletionStream>(params, ctx_.tokenizer,
                                               (api == ApiKind::chat ? "chatcmpl-" : "cmpl-") + std::to_string(id),
                                               prepared.request.lora ? params.model : ctx_.options.model_name,
                                               static_cast<int64_t>(std::time(nullptr)),
                                               static_cast<int>(prepared.request.prompt.size()), prepared.prompt_text);
  channel_ = std::make_shared<RequestChannel>(id);
  std::weak_ptr<HttpSession> weak = shared_from_this();
  auto exec = socket_.get_executor();
  channel_->set_notify([weak, exec] {
    asio::post(exec, [weak] {
      if (auto s = weak.lock()) s->on_channel();
    });
  });
  request_id_ = id;
  streaming_ = params.stream;
  headers_sent_ = false;
  ended_early_ = false;
  generating_ = true;
  try {
    ctx_.service.submit(prepared.request, channel_);
  } catch (...) {
    generating_ = false;
    channel_.reset();
    stream_.reset();
    throw;
  }
  watch();
}

void HttpSession::on_channel() {
  if (!generating_ || !channel_ || closed_) return;
  ChannelBatch b = channel_->take();
  if (!headers_sent_ && b.finished && b.finished->reason == FinishReason::rejected && b.tokens.empty()) {
    const std::string why = b.finished->error;
    end_generation();
    return respond_error(ApiError(400, "invalid_request_error", "", "rejected", why));
  }
  if (streaming_) {
    // Headers, events and (at the end) the terminating chunk go out in one write.
    std::string wire, out;
    if (!headers_sent_) {
      wire = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
             "Transfer-Encoding: chunked\r\n" +
             std::string(keep_alive_ ? "" : "Connection: close\r\n") + "\r\n";
      headers_sent_ = true;
      out = stream_->stream_start();
    }
    if (!b.tokens.empty() && !b.finished) out += stream_->on_tokens(b.tokens);
    if (b.finished) out += stream_->on_finished(b.tokens, *b.finished);
    if (!out.empty()) append_chunk_encoded(wire, out);
    if (b.finished) {
      wire += "0\r\n\r\n";
      end_generation();
      response_complete_ = true;
    }
    if (!wire.empty()) queue_write(std::move(wire));
    if (b.finished) return do_write();
  } else {
    if (b.finished) {
      const std::string body = stream_->on_finished(b.tokens, *b.finished);
      end_generation();
      return respond(200, body);
    }
    if (!b.tokens.empty()) stream_->on_tokens(b.tokens);
  }
  if (stream_->stopped() && !ended_early_) {
    ended_early_ = true;
    ctx_.service.finish_early(request_id_);
  }
}

void HttpSession::end_generation() {
  generating_ = false;
  if (channel_) channel_->set_notify(nullptr);
  channel_.reset();
}

void HttpSession::respond(int status, const std::string& body, const std::string& content_type,
                          const std::string& extra_headers) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\nContent-Type: " +
                     content_type + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers;
  if (!keep_alive_) head += "Connection: close\r\n";
  head += "\r\n";
  queue_write(head + body);
  response_complete_ = true;
  do_write();
}

void HttpSession::respond_error(const ApiError& e, const std::string& extra_headers) {
  respond(e.status, error_body(e), "application/json", extra_headers);
}

void HttpSession::append_chunk_encoded(std::string& wire, const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  wire.reserve(wire.size() + data.size() + 32);
  wire += size;
  wire += data;
  wire += "\r\n";
}

void HttpSession::queue_write(std::string data) {
  if (pending_.empty()) pending_ = std::move(data);
  else pending_ += data;
  do_write();
}

void HttpSession::do_write() {
  if (write_in_flight_ || closed_) return;
  if (pending_.empty()) {
    if (response_complete_) after_response();
    return;
  }
  writing_.swap(pending_);
  pending_.clear();
  write_in_flight_ = true;
  asio::async_write(socket_, asio::buffer(writing_), [self = shared_from_this()](beast::error_code ec, size_t) {
    self->write_in_flight_ = false;
    self->writing_.clear();
    if (ec) return self->client_gone();
    self->do_write();
  });
}

void HttpSession::after_response() {
  response_complete_ = false;
  stream_.reset();
  set_busy(false);
  if (!keep_alive_) {
    // Half-close, then read what the client still sends (a refused body) until it closes: closing
    // with unread bytes would reset the connection and could destroy the response in flight.
    beast::error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    closed_ = true;
    if (watch_in_flight_) return;  // the armed watch read does the draining
    return linger(0);
  }
  if (watch_in_flight_) {
    // The disconnect watch may hold the client's next request: stop it, then read on.
    next_after_watch_ = true;
    beast::error_code ignored;
    socket_.cancel(ignored);
    return;
  }
  read_request();
}

void HttpSession::linger(size_t n_read) {
  if (n_read > ctx_.options.max_body_bytes + (1u << 20)) {
    beast::error_code ignored;
    socket_.close(ignored);
    return;
  }
  socket_.async_read_some(asio::buffer(watch_buf_), [self = shared_from_this(), n_read](beast::error_code ec, size_t n) {
    beast::error_code ignored;
    if (ec) {
      self->socket_.close(ignored);
      return;
    }
    self->linger(n_read + n);
  });
}

void HttpSession::watch() {
  if (watch_in_flight_ || closed_) return;
  watch_in_flight_ = true;
  socket_.async_read_some(asio::buffer(watch_buf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->on_watch(ec, n);
  });
}

void HttpSession::on_watch(beast::error_code ec, size_t n) {
  watch_in_flight_ = false;
  if (closed_ && !ec) return linger(n);
  if (n > 0) {
    auto dst = buffer_.prepare(n);
    asio::buffer_copy(dst, asio::buffer(watch_buf_, n));
    buffer_.commit(n);
  }
  if (ec && !(ec == asio::error::operation_aborted && next_after_watch_)) return client_gone();
  if (buffer_.size() > ctx_.options.max_body_bytes + 64 * 1024) return client_gone();  // pipelining flood
  if (generating_ || write_in_flight_ || response_complete_) return watch();
  if (next_after_watch_) {
    next_after_watch_ = false;
    read_request();
  }
}

void HttpSession::client_gone() {
  if (closed_) return;
  closed_ = true;
  if (generating_) {
    ctx_.service.abort(request_id_);
    end_generation();
  }
  set_busy(false);
  beast::error_code ignored;
  socket_.close(ignored);
}

}  // namespace servelab::server
