#include "loadgen/http/server_probe.h"

#include <algorithm>
#include <chrono>
#include <map>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

namespace servelab::http_load {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

HttpReply http_exchange(const Endpoint& ep, const std::string& path, const std::string& body,
                        const std::map<std::string, std::string>& headers, double timeout_s) {
  HttpReply reply;
  asio::io_context ioc;
  tcp::socket socket(ioc);
  asio::steady_timer timer(ioc);
  bool timed_out = false;
  timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s)));
  timer.async_wait([&](boost::system::error_code ec) {
    if (ec) return;
    timed_out = true;
    boost::system::error_code ignored;
    socket.close(ignored);
  });
  http::request<http::string_body> req{body.empty() ? http::verb::get : http::verb::post, ep.prefix + path, 11};
  req.set(http::field::host, ep.host + ":" + ep.port);
  req.set(http::field::connection, "close");
  for (const auto& [k, v] : headers) req.set(k, v);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(16u << 20);
  std::string stage = "resolve " + ep.host;
  auto finish = [&](const boost::system::error_code& ec) {
    timer.cancel();
    if (ec && reply.status == 0) reply.error = timed_out ? "no answer within " + std::to_string(static_cast<int>(timeout_s)) + " s" : stage + ": " + ec.message();
  };
  tcp::resolver resolver(ioc);
  resolver.async_resolve(ep.host, ep.port, [&](boost::system::error_code ec, tcp::resolver::results_type results) {
    if (ec) return finish(ec);
    stage = "connect";
    asio::async_connect(socket, results, [&](boost::system::error_code ec, const tcp::endpoint&) {
      if (ec) return finish(ec);
      stage = "write";
      http::async_write(socket, req, [&](boost::system::error_code ec, size_t) {
        if (ec) return finish(ec);
        stage = "reading response";
        http::async_read(socket, buffer, parser, [&](boost::system::error_code ec, size_t) {
          if (parser.is_header_done()) {
            reply.status = parser.get().result_int();
            reply.body = parser.get().body();
          }
          finish(ec == http::error::end_of_stream ? boost::system::error_code{} : ec);
        });
      });
    });
  });
  ioc.run();
  return reply;
}

std::string server_error_message(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (auto e = j.find("error"); e != j.end()) {
      if (e->is_object() && e->contains("message") && (*e)["message"].is_string()) return (*e)["message"].get<std::string>();
      if (e->is_string()) return e->get<std::string>();
    }
    for (const char* k : {"message", "detail"})
      if (auto m = j.find(k); m != j.end() && m->is_string()) return m->get<std::string>();
  }
  std::string s = body.substr(0, 200);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::string preflight(const TargetSpec& target, const std::string& body) {
  const char* path = target.api == TargetApi::chat ? "/v1/chat/completions" : "/v1/completions";
  for (const auto& url : target.urls) {
    const Endpoint ep = parse_endpoint(url);
    const std::string where = "POST http://" + ep.host + ":" + ep.port + ep.prefix + path;
    const HttpReply r = http_exchange(ep, path, body, target.headers, std::min(target.timeout_s, 120.0));
    if (r.status == 0) return where + ": " + r.error;
    if (r.status != 200) return where + ": HTTP " + std::to_string(r.status) + ": " + server_error_message(r.body);
    if (r.body.find("data:") == std::string::npos)
      return where + ": HTTP 200 but not an event stream (" + server_error_message(r.body) + ")";
    if (r.body.find("\"error\"") != std::string::npos && r.body.find("\"choices\"") == std::string::npos)
      return where + ": the stream carried an error: " + server_error_message(r.body.substr(r.body.find('{')));
  }
  return "";
}

std::string metrics_engine(const std::string& text) {
  struct Mark {
    const char* prefix;
    const char* engine;
  };
  static const Mark marks[] = {{"\nservelab:", "servelab"}, {"\nvllm:", "vLLM"},     {"\nsglang:", "SGLang"},
                               {"\ntgi_", "TGI"},           {"\nllamacpp:", "llama.cpp"}};
  const std::string t = "\n" + text;
  for (const Mark& m : marks)
    if (t.find(m.prefix) != std::string::npos) return m.engine;
  return "";
}

ServerInfo describe_server(const TargetSpec& target) {
  ServerInfo info;
  if (target.urls.empty()) return info;
  const Endpoint ep = parse_endpoint(target.urls.front());
  const HttpReply models = http_exchange(ep, "/v1/models", "", target.headers, 5.0);
  if (models.status == 200) {
    const auto j = nlohmann::json::parse(models.body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("data") && j["data"].is_array())
      for (const auto& m : j["data"]) {
        if (m.is_object() && m.contains("id") && m["id"].is_string()) info.models.push_back(m["id"].get<std::string>());
        if (info.owned_by.empty() && m.is_object() && m.contains("owned_by") && m["owned_by"].is_string())
          info.owned_by = m["owned_by"].get<std::string>();
      }
  }
  const HttpReply metrics = http_exchange(ep, "/metrics", "", target.headers, 5.0);
  if (metrics.status == 200) {
    info.has_metrics = true;
    info.engine = metrics_engine(metrics.body);
  }
  return info;
}

std::string server_description(const ServerInfo& info, const TargetSpec& target) {
  std::string s = info.engine.empty() ? (info.owned_by.empty() ? std::string("server") : info.owned_by) : info.engine;
  s += " at ";
  for (size_t i = 0; i < target.urls.size(); ++i) s += (i ? ", " : "") + target.urls[i];
  const std::string model = !target.model.empty() ? target.model : (info.models.empty() ? "" : info.models.front());
  if (!model.empty()) s += " serving " + model;
  return s;
}

}  // namespace servelab::http_load
