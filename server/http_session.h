#pragma once
// One keep-alive connection of HttpServer (internal to server).
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/channel.h"
#include "server/completion_stream.h"
#include "server/http_server.h"

namespace servelab::server {

/// Reads requests one after another; a completion request is submitted to the service, and the
/// session writes what its channel delivers. While a request runs, a read stays armed on the
/// socket, so a client that goes away is noticed at once and its request aborted.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket socket, ServerContext& ctx);
  ~HttpSession();
  void start();
  /// Closes the socket (server stop); a running request is aborted.
  void close();

 private:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  void read_request();
  void on_read(boost::beast::error_code ec);
  void handle(Request& req);
  void route(Request& req);
  void start_completion(Request& req, ApiKind api);
  void on_channel();
  void end_generation();
  /// Whole response (status line, headers, body) with Content-Length.
  void respond(int status, const std::string& body, const std::string& content_type = "application/json",
               const std::string& extra_headers = "");
  void respond_error(const struct ApiError& e, const std::string& extra_headers = "");
  /// Appends `data` to `wire` as one chunk of chunked transfer encoding.
  static void append_chunk_encoded(std::string& wire, const std::string& data);
  void queue_write(std::string data);
  void do_write();
  void watch();
  void on_watch(boost::beast::error_code ec, size_t n);
  void after_response();
  void client_gone();
  void linger(size_t n_read);  ///< after a closing response: discard input until the client closes
  void set_busy(bool busy);  ///< counts this session in ServerContext::n_busy (drain waits for 0)

  boost::asio::ip::tcp::socket socket_;
  ServerContext& ctx_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  bool keep_alive_ = true;
  bool closed_ = false;
  bool busy_ = false;

  // The request in flight.
  std::shared_ptr<RequestChannel> channel_;
  std::unique_ptr<CompletionStream> stream_;
  uint64_t request_id_ = 0;
  bool streaming_ = false;
  bool headers_sent_ = false;
  bool generating_ = false;
  bool ended_early_ = false;

  // Writes: one in flight, the rest appended to pending_.
  std::string writing_, pending_;
  bool write_in_flight_ = false;
  bool response_complete_ = false;  ///< the last byte of the response is queued

  // Disconnect watch.
  bool watch_in_flight_ = false;
  bool next_after_watch_ = false;
  char watch_buf_[1024];
};

}  // namespace servelab::server
