#pragma once
// A scripted HTTP server for driver tests: one thread, one connection at a time, each answered
// by a script and then closed (Connection: close), so no test depends on timing. Needs nothing of
// the engine (test_loadgen_http links only the HTTP driver's library).
#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

namespace servelab::http_load::test {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class ScriptedServer {
 public:
  /// Gets the socket and the request (headers and body); writes what it wants.
  using Script = std::function<void(tcp::socket&, const std::string& request)>;
  explicit ScriptedServer(Script script)
      : script_(std::move(script)), acceptor_(ioc_, {asio::ip::make_address("127.0.0.1"), 0}) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { loop(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    try {  // wake the blocking accept
      asio::io_context io;
      tcp::socket s(io);
      s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)});
    } catch (...) {
    }
    thread_.join();
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int n_requests() const { return n_requests_; }

 private:
  void loop() {
    while (!stop_) {
      tcp::socket sock(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(sock, ec);
      if (ec || stop_) return;
      asio::streambuf buf;
      const size_t n = asio::read_until(sock, buf, "\r\n\r\n", ec);
      if (ec) continue;
      std::string req(asio::buffers_begin(buf.data()), asio::buffers_begin(buf.data()) + n);
      buf.consume(n);
      size_t len = 0;
      if (auto p = req.find("Content-Length: "); p != std::string::npos) len = std::stoul(req.substr(p + 16));
      std::string body(asio::buffers_begin(buf.data()), asio::buffers_end(buf.data()));
      if (body.size() < len) {
        std::string rest(len - body.size(), '\0');
        asio::read(sock, asio::buffer(rest), ec);
        body += rest;
      }
      ++n_requests_;
      script_(sock, req + body);
      sock.shutdown(tcp::socket::shutdown_both, ec);
    }
  }

  Script script_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> n_requests_{0};
  std::thread thread_;
};

/// An SSE response (Connection: close, no length: the body ends when the socket closes).
inline std::string sse_response(const std::string& events) {
  return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + events;
}

inline void write_all(tcp::socket& s, const std::string& data) {
  boost::system::error_code ec;
  asio::write(s, asio::buffer(data), ec);
}

/// Blocks until the client closes (or resets) the connection.
inline void wait_for_close(tcp::socket& s) {
  char c[256];
  boost::system::error_code ec;
  while (!ec) s.read_some(asio::buffer(c), ec);
}

}  // namespace servelab::http_load::test
