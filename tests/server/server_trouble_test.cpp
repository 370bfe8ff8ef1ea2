// Trouble at the server, shrunk for CI: streams cut at random points, 10x overload, draining.
// Afterwards every KV block is free and /metrics adds up.
#include <gtest/gtest.h>

#include <random>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "loadgen/http/http_driver.h"
#include "loadgen/sources.h"
#include "tests/server/server_test_util.h"

namespace servelab::server::test {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

std::string raw_request(const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

/// Reads up to n bytes (less at EOF).
std::string read_upto(tcp::socket& s, size_t n) {
  std::string out(n, '\0');
  boost::system::error_code ec;
  const size_t got = asio::read(s, asio::buffer(out), ec);
  out.resize(got);
  return out;
}

uint64_t finished_total(const MetricsSnapshot& m) {
  uint64_t n = 0;
  for (const auto& [k, v] : m.finished) n += v;
  return n;
}

TEST(ServerTrouble, RandomStreamCutsLeaveNoKvAndConsistentMetrics) {
  TestServer srv;
  std::mt19937 rng(123);
  constexpr int kStreams = 60, kParallel = 10;  // 100 took 13 CPU-s under ASan
  asio::io_context io;
  for (int batch = 0; batch < kStreams / kParallel; ++batch) {
    std::vector<tcp::socket> socks;
    for (int i = 0; i < kParallel; ++i) {
      socks.emplace_back(io);
      socks.back().connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(srv.port)});
      const std::string body = R"({"prompt":[3,4,5,6,7,8],"max_tokens":64,"ignore_eos":true,"stream":true})";
      asio::write(socks.back(), asio::buffer(raw_request(body)));
    }
    for (auto& s : socks) {
      read_upto(s, std::uniform_int_distribution<size_t>(0, 6000)(rng));  // a full response is ~9 KB
      boost::system::error_code ec;
      s.close(ec);  // cut
    }
  }
  ASSERT_TRUE(srv.wait_idle());
  srv.service->check_idle_clean();  // every KV block free, engine invariants hold
  const MetricsSnapshot m = srv.metrics.snapshot();
  EXPECT_EQ(finished_total(m), static_cast<uint64_t>(kStreams));
  EXPECT_GT(m.finished.count("abort") ? m.finished.at("abort") : 0, 0u);
  // Serving continues.
  const auto r = post(srv.port, "/v1/completions", R"({"prompt":[1,2],"max_tokens":4})");
  EXPECT_EQ(r.status, 200);
  ASSERT_TRUE(srv.wait_idle());
  const MetricsSnapshot after = srv.metrics.snapshot();
  EXPECT_EQ(finished_total(after), static_cast<uint64_t>(kStreams + 1));
  EXPECT_EQ(after.n_running, 0);
  EXPECT_EQ(after.n_waiting, 0);
  EXPECT_EQ(after.kv_usage, 0.0);
  srv.service->check_idle_clean();
}

TEST(ServerTrouble, TenTimesCapacityIsRefusedCleanly) {
  EngineServiceOptions so;
  so.max_waiting = 4;
  TestServer srv(so, {}, tiny_engine_config(4));  // capacity: 4 running + 4 waiting
  Plan plan;
  constexpr int kRequests = 80;
  for (int i = 0; i < kRequests; ++i) {
    PlannedRequest p;
    p.id = i;
    p.prompt = {4, 5, 6, 7};
    p.output_tokens = 128;
    plan.requests.push_back(p);
  }
  OpenLoopSource source(plan);
  http_load::HttpDriverOptions o;
  o.target.urls = {"http://127.0.0.1:" + std::to_string(srv.port)};
  o.target.timeout_s = 120;
  int n_ok = 0, n_rejected = 0;
  RecordSinks sinks;
  sinks.on_record = [&](const RequestRecord& r) {
    if (r.status == RecordStatus::ok) {
      ++n_ok;
      EXPECT_EQ(r.output_tokens, 128);  // every admitted request completes
    } else {
      EXPECT_EQ(r.status, RecordStatus::rejected) << r.error;
      EXPECT_EQ(r.error.rfind("HTTP 429", 0), 0u) << r.error;
      ++n_rejected;
    }
  };
  const auto st = http_load::drive_http(source, o, "overload", sinks);
  EXPECT_EQ(st.stats.n_finished, kRequests);
  EXPECT_EQ(n_ok + n_rejected, kRequests);
  EXPECT_GE(n_ok, 8);
  EXPECT_GT(n_rejected, 0);
  ASSERT_TRUE(srv.wait_idle());
  srv.service->check_idle_clean();
  const MetricsSnapshot m = srv.metrics.snapshot();
  EXPECT_EQ(m.rejected.at("queue_full"), static_cast<uint64_t>(n_rejected));
  EXPECT_EQ(finished_total(m), static_cast<uint64_t>(n_ok));
  EXPECT_EQ(m.n_generation_tokens, static_cast<uint64_t>(n_ok) * 128);
}

TEST(ServerTrouble, DrainLetsRunningStreamsFinish) {
  TestServer srv;
  asio::io_context io;
  tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(srv.port)});
  asio::write(s, asio::buffer(raw_request(R"({"prompt":[3,4,5],"max_tokens":100,"ignore_eos":true,"stream":true})")));
  std::string got;
  while (got.find("data: ") == std::string::npos) {
    const std::string part = read_upto(s, 1);
    ASSERT_FALSE(part.empty());
    got += part;
  }
  srv.server->drain();  // SIGTERM does this
  boost::system::error_code ec;
  std::string rest;
  char buf[4096];
  for (size_t n; (n = s.read_some(asio::buffer(buf), ec)) > 0 || !ec;) rest.append(buf, n);
  got += rest;
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos);
  EXPECT_NE(got.find("\"finish_reason\":\"length\""), std::string::npos);
  srv.server->wait();  // the server stopped by itself once drained
  EXPECT_EQ(srv.service->n_in_flight(), 0);
  srv.service->check_idle_clean();
}

}  // namespace
}  // namespace servelab::server::test
