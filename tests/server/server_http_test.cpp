// The server's routes and every error path: status and OpenAI-style error body.
#include <gtest/gtest.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "tests/server/server_test_util.h"

namespace servelab::server::test {
namespace {

using nlohmann::json;

/// The error object of an error reply (checks the shape).
json error_of(const HttpReply& r) {
  json j = json::parse(r.body);
  EXPECT_TRUE(j.contains("error")) << r.body;
  const json& e = j["error"];
  EXPECT_TRUE(e.contains("message") && e.contains("type") && e.contains("param") && e.contains("code")) << r.body;
  return e;
}

class ServerHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { srv_ = new TestServer(); }
  static void TearDownTestSuite() {
    delete srv_;
    srv_ = nullptr;
  }
  static TestServer* srv_;
};
TestServer* ServerHttp::srv_ = nullptr;

TEST_F(ServerHttp, HealthModelsMetrics) {
  EXPECT_EQ(get(srv_->port, "/health").status, 200);
  const auto m = get(srv_->port, "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(json::parse(m.body)["data"][0]["id"], "tiny");
  const auto met = get(srv_->port, "/metrics");
  ASSERT_EQ(met.status, 200);
  for (const char* name : {"servelab:num_requests_running", "servelab:num_requests_waiting", "servelab:kv_cache_usage_perc",
                           "servelab:num_preemptions_total", "servelab:prompt_tokens_total",
                           "servelab:generation_tokens_total", "servelab:time_to_first_token_seconds_bucket",
                           "servelab:time_per_output_token_seconds_bucket", "servelab:inter_token_latency_seconds_bucket",
                           "servelab:e2e_request_latency_seconds_bucket", "servelab:request_rejected_total"})
    EXPECT_NE(met.body.find(name), std::string::npos) << name;
}

TEST_F(ServerHttp, CompletionWithTokenIds) {
  const auto r = post(srv_->port, "/v1/completions", R"({"prompt":[5,6,7,8],"max_tokens":6,"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ids_of(j["choices"][0]["text"]).size(), 6u);
}

TEST_F(ServerHttp, StreamedCompletionEndsWithDoneAndUsage) {
  const auto r = post(srv_->port, "/v1/completions",
                      R"({"prompt":"hello","max_tokens":5,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.raw[boost::beast::http::field::content_type], "text/event-stream");
  int n_token_chunks = 0;
  std::string text;
  json usage;
  std::string last;
  for (size_t i = 0; (i = r.body.find("data: ", i)) != std::string::npos; i += 6) {
    const std::string data = r.body.substr(i + 6, r.body.find("\n\n", i) - i - 6);
    last = data;
    if (data == "[DONE]") continue;
    const json c = json::parse(data);
    if (!c["usage"].is_null()) usage = c["usage"];
    if (!c["choices"].empty()) {
      ++n_token_chunks;
      text += c["choices"][0]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(last, "[DONE]");
  EXPECT_EQ(n_token_chunks, 5);  // one chunk per token, the last with finish_reason
  EXPECT_EQ(ids_of(text).size(), 5u);
  EXPECT_EQ(usage["completion_tokens"], 5);
  EXPECT_EQ(usage["prompt_tokens"], 5);
}

TEST_F(ServerHttp, ChatStreamsRoleThenContent) {
  const auto r = post(srv_->port, "/v1/chat/completions",
                      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"ignore_eos":true,"stream":true})");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_NE(r.body.find("chat.completion.chunk"), std::string::npos);
  EXPECT_NE(r.body.find("\"finish_reason\":\"length\""), std::string::npos);
  const auto full = post(srv_->port, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})");
  ASSERT_EQ(full.status, 200);
  EXPECT_EQ(json::parse(full.body)["choices"][0]["message"]["role"], "assistant");
}

TEST_F(ServerHttp, SeveralSamplesAndSeed) {
  const std::string body = R"({"prompt":[9,10,11],"max_tokens":4,"n":3,"temperature":1.0,"seed":5,"ignore_eos":true})";
  const auto a = post(srv_->port, "/v1/completions", body);
  const auto b = post(srv_->port, "/v1/completions", body);
  ASSERT_EQ(a.status, 200);
  const json ja = json::parse(a.body);
  EXPECT_EQ(ja["choices"].size(), 3u);
  EXPECT_EQ(ja["usage"]["completion_tokens"], 12);
  EXPECT_EQ(ja["choices"], json::parse(b.body)["choices"]);  // seeded: reproducible
}

TEST_F(ServerHttp, ErrorPaths) {
  const int port = srv_->port;
  auto bad = post(port, "/v1/completions", "{oops");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(error_of(bad)["code"], "invalid_json");
  bad = post(port, "/v1/completions", R"({"prompt":"x","max_tokens":-1})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(error_of(bad)["param"], "max_tokens");
  bad = post(port, "/v1/completions", R"({"prompt":[1,2,999999]})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(error_of(bad)["param"], "prompt[2]");
  bad = post(port, "/v1/completions", R"({"prompt":"x","model":"other"})");
  EXPECT_EQ(bad.status, 404);
  EXPECT_EQ(error_of(bad)["param"], "model");
  // Prompt beyond the model length (512), and prompt + max_tokens beyond it.
  json longp = {{"prompt", std::vector<int>(600, 3)}};
  bad = post(port, "/v1/completions", longp.dump());
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(error_of(bad)["code"], "context_length_exceeded");
  bad = post(port, "/v1/completions", R"({"prompt":[1,2],"max_tokens":600})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(error_of(bad)["param"], "max_tokens");
  EXPECT_EQ(get(port, "/nope").status, 404);
  EXPECT_EQ(error_of(get(port, "/nope"))["code"], "not_found");
  EXPECT_EQ(get(port, "/v1/completions").status, 405);
  // Over the body limit (4 MiB default).
  const auto big = post(port, "/v1/completions", std::string(5 << 20, ' '));
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(error_of(big)["code"], "body_too_large");
  const auto snap = srv_->metrics.snapshot();
  EXPECT_GE(snap.rejected.at("invalid"), 3u);
  EXPECT_GE(snap.rejected.at("too_long"), 2u);
  EXPECT_EQ(snap.rejected.at("body_too_large"), 1u);
}

TEST(ServerAuth, ApiKeyNeedsBearer) {
  ServerOptions o;
  o.api_key = "sekret";
  TestServer srv({}, o);
  auto r = post(srv.port, "/v1/completions", R"({"prompt":"x","max_tokens":1})");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(error_of(r)["type"], "authentication_error");
  r = post(srv.port, "/v1/completions", R"({"prompt":"x","max_tokens":1})", {{"Authorization", "Bearer wrong"}});
  EXPECT_EQ(r.status, 401);
  r = post(srv.port, "/v1/completions", R"({"prompt":"x","max_tokens":1})", {{"Authorization", "Bearer sekret"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(get(srv.port, "/health").status, 200);  // health stays open for probes
  EXPECT_EQ(srv.metrics.snapshot().rejected.at("unauthorized"), 2u);
}

TEST(ServerQueue, FullWaitingQueueGets429WithRetryAfter) {
  EngineServiceOptions so;
  so.max_waiting = 0;  // nothing may wait beyond one batch
  TestServer srv(so, {}, tiny_engine_config(1));
  // One request holds the only batch seat while streaming; the next is refused.
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket hold(io);
  hold.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(srv.port)});
  const std::string body = R"({"prompt":[3,4],"max_tokens":400,"ignore_eos":true,"stream":true})";
  boost::asio::write(hold, boost::asio::buffer("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                                std::to_string(body.size()) + "\r\n\r\n" + body));
  char first[1];
  boost::asio::read(hold, boost::asio::buffer(first));  // the stream has started: the seat is taken
  const auto r = post(srv.port, "/v1/completions", R"({"prompt":"x","max_tokens":1})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(error_of(r)["code"], "queue_full");
  EXPECT_EQ(r.raw["Retry-After"], "1");
  EXPECT_EQ(srv.metrics.snapshot().rejected.at("queue_full"), 1u);
  hold.close();
}

TEST(ServerDrain, DrainingRefusesNewRequests) {
  TestServer srv;
  srv.service->start_draining();
  const auto r = post(srv.port, "/v1/completions", R"({"prompt":"x","max_tokens":1})");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(error_of(r)["code"], "draining");
  srv.server->drain();
  srv.server->wait();  // returns once drained: nothing was in flight
}

}  // namespace
}  // namespace servelab::server::test
