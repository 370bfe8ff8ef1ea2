#include "server/http_server.h"

#include <csignal>
#include <mutex>
#include <stdexcept>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "server/http_session.h"

namespace servelab::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

void ServerOptions::validate() const {
  if (port < 0 || port > 65535) throw std::invalid_argument("port must be in [0, 65535] (got " + std::to_string(port) + ")");
  if (io_threads < 1 || io_threads > 64)
    throw std::invalid_argument("io_threads must be in [1, 64] (got " + std::to_string(io_threads) + ")");
  if (max_body_bytes < 1024)
    throw std::invalid_argument("max_body_bytes must be >= 1024 (got " + std::to_string(max_body_bytes) + ")");
  if (host.empty()) throw std::invalid_argument("host must not be empty");
}

struct HttpServer::Impl {
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::optional<asio::signal_set> signals;
  asio::steady_timer drain_timer{ioc};
  std::vector<std::thread> threads;
  std::mutex sessions_mu;
  std::vector<std::weak_ptr<HttpSession>> sessions;
  bool stopped = false;

  void accept(ServerContext& ctx) {
    acceptor.async_accept(asio::make_strand(ioc), [this, &ctx](boost::system::error_code ec, tcp::socket socket) {
      if (!acceptor.is_open()) return;
      if (!ec) {
        boost::system::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        auto s = std::make_shared<HttpSession>(std::move(socket), ctx);
        {
          std::lock_guard lock(sessions_mu);
          std::erase_if(sessions, [](const auto& w) { return w.expired(); });
          sessions.push_back(s);
        }
        s->start();
      }
      accept(ctx);
    });
  }

  void close_sessions() {
    std::lock_guard lock(sessions_mu);
    for (auto& w : sessions)
      if (auto s = w.lock()) s->close();
    sessions.clear();
  }

  /// Waits (polling every 20 ms) until no session has a request in flight, then stops.
  void wait_drained(ServerContext& ctx) {
    drain_timer.expires_after(std::chrono::milliseconds(20));
    drain_timer.async_wait([this, &ctx](boost::system::error_code ec) {
      if (ec) return;
      if (ctx.n_busy.load() > 0 || ctx.service.n_in_flight() > 0) return wait_drained(ctx);
      close_sessions();
      ioc.stop();
    });
  }
};

HttpServer::HttpServer(ServerOptions options, GenerationService& service, const Tokenizer& tokenizer,
                       ServerMetrics& metrics)
    : ctx_(new ServerContext{std::move(options), service, tokenizer, metrics}), impl_(std::make_unique<Impl>()) {
  ctx_->constraints = std::make_unique<grammar::ConstraintCompiler>(tokenizer, service.model().vocab_size);
  ctx_->options.validate();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(ctx_->options.host, ec);
  tcp::endpoint ep;
  if (ec) {
    tcp::resolver resolver(impl_->ioc);
    auto results = resolver.resolve(ctx_->options.host, std::to_string(ctx_->options.port), ec);
    if (ec || results.empty())
      throw std::runtime_error("cannot resolve host " + ctx_->options.host + ": " + ec.message());
    ep = *results.begin();
  } else {
    ep = tcp::endpoint(address, static_cast<unsigned short>(ctx_->options.port));
  }
  auto& acc = impl_->acceptor;
  acc.open(ep.protocol(), ec);
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error("cannot listen on " + ctx_->options.host + ":" + std::to_string(ctx_->options.port) +
                             ": " + ec.message());
  bound_port_ = acc.local_endpoint().port();
  impl_->accept(*ctx_);
  if (handle_signals) {
    impl_->signals.emplace(impl_->ioc, SIGTERM, SIGINT);
    impl_->signals->async_wait([this](boost::system::error_code e, int) {
      if (!e) drain();
    });
  }
  for (int i = 0; i < ctx_->options.io_threads; ++i) impl_->threads.emplace_back([this] { impl_->ioc.run(); });
}

void HttpServer::drain() {
  asio::post(impl_->ioc, [this] {
    if (ctx_->draining.exchange(true)) return;
    boost::system::error_code ignored;
    impl_->acceptor.close(ignored);
    if (impl_->signals) impl_->signals->cancel(ignored);
    ctx_->service.start_draining();
    impl_->wait_drained(*ctx_);
  });
}

void HttpServer::wait() {
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
}

void HttpServer::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->close_sessions();
  asio::post(impl_->ioc, [this] {
    boost::system::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->ioc.stop();
  });
  wait();
}

}  // namespace servelab::server
