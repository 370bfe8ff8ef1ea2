// The HTTP driver against scripted servers: success with and without usage, and each failure
// (HTTP 500, a stream cut mid-way, an error event, a refused connection, a timeout, a malformed
// chunk, 429) recorded with its reason, never dropped.
#include <gtest/gtest.h>

#include <map>

#include "loadgen/http/http_driver.h"
#include "tests/loadgen_http/scripted_server.h"

namespace servelab::http_load::test {
namespace {

/// n requests all due at t = 0 (prompt 4 tokens, 8 output tokens): a source of its own, so this
/// binary links the HTTP driver's library and nothing of the engine.
class BurstSource final : public RequestSource {
 public:
  explicit BurstSource(int n) : n_(n) {}
  std::optional<double> next_time() const override {
    return exhausted() ? std::nullopt : std::optional<double>(0.0);
  }
  Request take() override {
    Request r;
    r.id = uint64_t(next_++);
    r.prompt = {5, 6, 7, 8};
    r.sampling.max_tokens = 8;
    return r;
  }
  bool exhausted() const override { return next_ >= n_; }

 private:
  int n_;
  int next_ = 0;
};

std::vector<RequestRecord> drive(const std::vector<std::string>& urls, int n_requests, double timeout_s = 30.0,
                                 Balance balance = Balance::round_robin, HttpDriveStats* stats = nullptr) {
  BurstSource source(n_requests);
  HttpDriverOptions o;
  o.target.urls = urls;
  o.target.timeout_s = timeout_s;
  o.target.balance = balance;
  std::vector<RequestRecord> records;
  RecordSinks sinks;
  sinks.on_record = [&](const RequestRecord& r) { records.push_back(r); };
  HttpDriveStats st = drive_http(source, o, "t", sinks);
  if (stats) *stats = st;
  return records;
}

std::string chunk(const std::string& text, const char* finish = nullptr) {
  return std::string("data: {\"choices\":[{\"index\":0,\"text\":\"") + text + "\",\"finish_reason\":" +
         (finish ? std::string("\"") + finish + "\"" : "null") + "}]}\n\n";
}

TEST(HttpDriver, StreamWithUsageInLastChunk) {
  std::string seen_request;
  ScriptedServer srv([&](tcp::socket& s, const std::string& req) {
    seen_request = req;
    write_all(s, sse_response(chunk("a") + chunk("") + chunk("bc d") + chunk("e", "length") +
                              "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":8}}\n\n"
                              "data: [DONE]\n\n"));
  });
  const auto recs = drive({srv.url()}, 1);
  ASSERT_EQ(recs.size(), 1u);
  const RequestRecord& r = recs[0];
  EXPECT_EQ(r.status, RecordStatus::ok) << r.error;
  EXPECT_EQ(r.output_tokens, 8);             // from usage (chunks carried several tokens)
  EXPECT_EQ(r.token_times_s.size(), 4u);      // one timestamp per token-bearing chunk
  EXPECT_EQ(r.prompt_tokens, 4);
  EXPECT_GE(r.first_token_s, r.sent_s);
  EXPECT_GE(r.end_s, r.first_token_s);
  EXPECT_NE(seen_request.find("POST /v1/completions HTTP/1.1"), std::string::npos);
  EXPECT_NE(seen_request.find("\"prompt\":[5,6,7,8]"), std::string::npos);
  EXPECT_NE(seen_request.find("\"max_tokens\":8"), std::string::npos);
  EXPECT_NE(seen_request.find("\"include_usage\":true"), std::string::npos);
}

TEST(HttpDriver, WithoutUsageTokensAreCountedChunks) {
  ScriptedServer srv([](tcp::socket& s, const std::string&) {
    write_all(s, sse_response(chunk("a") + chunk("b") + chunk("c", "stop") + "data: [DONE]\n\n"));
  });
  const auto recs = drive({srv.url()}, 1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, RecordStatus::ok);
  EXPECT_EQ(recs[0].output_tokens, 3);
}

TEST(HttpDriver, Http500IsRecordedWithStatusAndMessage) {
  ScriptedServer srv([](tcp::socket& s, const std::string&) {
    const std::string body = R"({"error":{"message":"boom","type":"server_error","param":null,"code":null}})";
    write_all(s, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  });
  const auto recs = drive({srv.url()}, 1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, RecordStatus::error);
  EXPECT_EQ(recs[0].error, "HTTP 500: boom");
}

TEST(HttpDriver, StreamCutMidwayAndErrorEventAreFailures) {
  ScriptedServer cut([](tcp::socket& s, const std::string&) { write_all(s, sse_response(chunk("a") + chunk("b"))); });
  auto recs = drive({cut.url()}, 1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, RecordStatus::error);
  EXPECT_EQ(recs[0].error, "stream ended before [DONE] or a finish_reason");
  EXPECT_EQ(recs[0].output_tokens, 2);  // what came before the cut is kept
  EXPECT_EQ(recs[0].token_times_s.size(), 2u);

  ScriptedServer err([](tcp::socket& s, const std::string&) {
    write_all(s, sse_response(chunk("a") + "data: {\"error\":{\"message\":\"engine died\",\"code\":500}}\n\n"));
  });
  recs = drive({err.url()}, 1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, RecordStatus::error);
  EXPECT_EQ(recs[0].error, "error event: engine died");
}

TEST(HttpDriver, MalformedChunk) {
  ScriptedServer srv([](tcp::socket& s, const std::string&) {
    write_all(s, sse_response(chunk("a") + "data: {\"choices\": [oops\n\n" + chunk("b", "length")));
  });
  const auto recs = drive({srv.url()}, 1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, RecordStatus::error);
  EXPECT_EQ(recs[0].error.rfind("malformed chunk: {\"choices\": [oops", 0), 0u) << recs[0].error;
}

TEST(HttpDriver, RefusedConnection) {
  int port = 0;
  {
    asio::io_context io;
    tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }  // closed: nothing listens there now
  const auto recs = drive({"http://127.0.0.1:" + std::to_string(port)}, 3);
  ASSERT_EQ(recs.size(), 3u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, RecordStatus::error);
    EXPECT_EQ(r.error, "connect: Connection refused");
  }
}

TEST(HttpDriver, Timeout) {
  ScriptedServer srv([](tcp::socket& s, const std::string&) {
    write_all(s, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + chunk("a"));
    wait_for_close(s);  // never finishes: the client's timeout must end it
  });
  const auto recs = drive({srv.url()}, 1, 0.3);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, RecordStatus::error);
  EXPECT_EQ(recs[0].error, "timeout after 0.3 s");
  EXPECT_EQ(recs[0].output_tokens, 1);
}

// Stopping the run while a response streams fails the call with a read still pending on its
// connection (as a timeout does): under the sanitizers this was a heap-use-after-free of the
// connection's buffer (scripts/sanitize.sh tsan).
TEST(HttpDriver, StopWhileStreamingRecordsAnAbort) {
  std::atomic<bool> stop{false};
  ScriptedServer srv([&](tcp::socket& s, const std::string&) {
    write_all(s, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + chunk("a"));
    stop = true;
    wait_for_close(s);  // never finishes: the stop must end it
  });
  BurstSource source(1);
  HttpDriverOptions o;
  o.target.urls = {srv.url()};
  std::vector<RequestRecord> recs;
  RecordSinks sinks;
  sinks.on_record = [&](const RequestRecord& r) { recs.push_back(r); };
  const HttpDriveStats st = drive_http(source, o, "t", sinks, {}, &stop);
  EXPECT_TRUE(st.stats.stopped);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, RecordStatus::aborted);
  EXPECT_EQ(recs[0].error, "aborted before it finished (run stopped)");
}

TEST(HttpDriver, TooManyRequestsIsRejected) {
  ScriptedServer srv([](tcp::socket& s, const std::string&) {
    const std::string body = R"({"error":{"message":"queue full","type":"rate_limit_error","param":null,"code":"queue_full"}})";
    write_all(s, "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n" + body);
  });
  const auto recs = drive({srv.url()}, 2);
  ASSERT_EQ(recs.size(), 2u);
  for (const auto& r : recs) {
    EXPECT_EQ(r.status, RecordStatus::rejected);
    EXPECT_EQ(r.error, "HTTP 429: queue full");
  }
}

TEST(HttpDriver, ReplicasShareTheLoadRoundRobin) {
  auto ok = [](tcp::socket& s, const std::string&) { write_all(s, sse_response(chunk("a", "length") + "data: [DONE]\n\n")); };
  ScriptedServer a(ok), b(ok);
  HttpDriveStats st;
  const auto recs = drive({a.url(), b.url()}, 10, 30.0, Balance::round_robin, &st);
  ASSERT_EQ(recs.size(), 10u);
  for (const auto& r : recs) EXPECT_EQ(r.status, RecordStatus::ok) << r.error;
  EXPECT_EQ(a.n_requests(), 5);
  EXPECT_EQ(b.n_requests(), 5);
  ASSERT_EQ(st.replicas.size(), 2u);
  EXPECT_EQ(st.replicas[0].n_ok, 5);
  EXPECT_EQ(st.replicas[1].n_sent, 5);
}

TEST(HttpDriver, BadUrlIsAnError) {
  EXPECT_THROW(drive({"https://x"}, 1), std::invalid_argument);
  EXPECT_THROW(drive({"127.0.0.1:80"}, 1), std::invalid_argument);
  EXPECT_EQ(parse_endpoint("http://h:81/v1").prefix, "");
  EXPECT_EQ(parse_endpoint("http://h:81/proxy/").prefix, "/proxy");
  EXPECT_EQ(parse_endpoint("http://[::1]:9").host, "::1");
}

}  // namespace
}  // namespace servelab::http_load::test
