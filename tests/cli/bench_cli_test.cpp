// `servelab bench` as a vLLM user runs it, against loopback servers with scripted answers: honest
// exit codes with the failures' reasons, the pre-flight request, a pasted endpoint URL, their
// flag names, conflicting flags refused, and a summary that describes the server under test.
#include <mutex>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"
#include "tests/loadgen/http_test_util.h"

namespace servelab::cli_test {
namespace {

using http_load::test::ScriptedServer;
using http_load::test::sse_response;
using http_load::test::tcp;
using http_load::test::write_all;

std::string chunk(const std::string& text, const char* finish = nullptr) {
  return std::string("data: {\"choices\":[{\"index\":0,\"text\":\"") + text + "\",\"finish_reason\":" +
         (finish ? std::string("\"") + finish + "\"" : std::string("null")) + "}]}\n\n";
}

/// A vLLM-like server: streams 3 tokens on POST /v1/completions, lists one model, serves vLLM
/// metric names (with spec_decode counters that grow by 2 drafts of 3 tokens, 4 accepted, per
/// completion served: 2 at position 0, 1 at 1 and at 2); anything else is 404. Every request line
/// is kept.
struct FakeVllm {
  std::vector<std::string> lines;
  std::mutex mu;
  int completions = 0;
  ScriptedServer server{[this](tcp::socket& s, const std::string& req) {
    const std::string line = req.substr(0, req.find("\r\n"));
    {
      std::lock_guard lock(mu);
      lines.push_back(line);
    }
    if (line.rfind("POST /v1/completions ", 0) == 0) {
      {
        std::lock_guard lock(mu);
        ++completions;
      }
      write_all(s, sse_response(chunk("a") + chunk("b") + chunk("c", "length") +
                                "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3}}\n\n"
                                "data: [DONE]\n\n"));
    } else if (line.rfind("GET /v1/models ", 0) == 0) {
      const std::string body = R"({"object":"list","data":[{"id":"Qwen/Qwen3-0.6B","owned_by":"vllm"}]})";
      write_all(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body);
    } else if (line.rfind("GET /metrics ", 0) == 0) {
      int n = 0;
      {
        std::lock_guard lock(mu);
        n = completions;
      }
      const std::string c = "{engine=\"0\",model_name=\"q\"} ";
      const std::string body = "vllm:num_requests_running{model_name=\"q\"} 1\nvllm:num_requests_waiting{model_name=\"q\"} 0\n"
                               "vllm:spec_decode_num_drafts_total" + c + std::to_string(2 * n) +
                               "\nvllm:spec_decode_num_draft_tokens_total" + c + std::to_string(6 * n) +
                               "\nvllm:spec_decode_num_accepted_tokens_total" + c + std::to_string(4 * n) +
                               "\nvllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"q\",position=\"0\"} " +
                               std::to_string(2 * n) +
                               "\nvllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"q\",position=\"1\"} " +
                               std::to_string(n) +
                               "\nvllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"q\",position=\"2\"} " +
                               std::to_string(n) + "\n";
      write_all(s, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body);
    } else {
      write_all(s, "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 27\r\n\r\n"
                   "{\"detail\":\"Not Found here\"}");
    }
  }};
};

/// A port with nothing listening.
int closed_port() {
  boost::asio::io_context io;
  tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

TEST(BenchCli, NothingListeningStopsAtThePreflightWithNoFolder) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string out = tmp.file("out");
  const CliResult r = run_servelab({"bench", "--url", "http://127.0.0.1:" + std::to_string(closed_port()), "--rate", "4",
                                    "--n", "5", "--out", out, "-q", "--no-plots"},
                                   tmp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("pre-flight"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Connection refused"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(BenchCli, WrongPathStopsWithTheServersAnswer) {
  SERVELAB_REQUIRE_BINARY();
  FakeVllm vllm;
  TempDir tmp;
  const CliResult r = run_servelab({"bench", "--url", vllm.server.url() + "/api", "--n", "2", "--out", tmp.file("o"), "-q"}, tmp);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("HTTP 404: Not Found here"), std::string::npos) << r.output;
}

TEST(BenchCli, PastedEndpointUrlAndInfRateRunAndTheSummaryNamesTheServer) {
  SERVELAB_REQUIRE_BINARY();
  FakeVllm vllm;
  TempDir tmp;
  const std::string out = tmp.file("out");
  const CliResult r = run_servelab({"bench", "--url", vllm.server.url() + "/v1/completions", "--rate", "inf", "--n", "3",
                                    "--out", out, "-q", "--no-plots"},
                                   tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const auto& line : vllm.lines) EXPECT_EQ(line.find("/v1/completions/v1"), std::string::npos) << line;
  const auto s = nlohmann::json::parse(read_text(out + "/summary.json"));
  EXPECT_EQ(s["runs"][0]["n_failed"], 0);
  EXPECT_EQ(s["runs"][0]["backend"], "http");
  EXPECT_EQ(s["runs"][0]["batching"], "");
  EXPECT_EQ(s["runs"][0]["mode"], "max");
  const std::string device = s["environment"]["device"];
  EXPECT_NE(device.find("server: vLLM at"), std::string::npos) << device;
  EXPECT_NE(device.find("Qwen/Qwen3-0.6B"), std::string::npos) << device;
  EXPECT_EQ(device.find("OpenBLAS"), std::string::npos) << device;
  // The server's own state, scraped from its /metrics on the run's time axis.
  const auto lines = read_lines(out + "/server_metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  const auto m = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(m["engine"], "vLLM");
  EXPECT_EQ(m["running"], 1.0);
  // Speculative decoding as the server counted it: its counters after the run minus before (the
  // pre-flight request came before the first scrape), 3 completions of 2 drafts each.
  const auto& sd = s["runs"][0]["metrics"]["spec_decode"];
  EXPECT_EQ(sd["source"], "server_metrics");
  EXPECT_EQ(sd["num_drafts"], 6);
  EXPECT_EQ(sd["num_draft_tokens"], 18);
  EXPECT_EQ(sd["num_accepted_tokens"], 12);
  EXPECT_EQ(sd["num_accepted_tokens_per_pos"], nlohmann::json::parse("[6, 3, 3]"));
  EXPECT_DOUBLE_EQ(sd["mean_acceptance_length"].get<double>(), 3.0);
  const std::string md = read_text(out + "/report.md");
  EXPECT_NE(md.find("## Speculative decoding"), std::string::npos) << md;
  EXPECT_NE(md.find("server /metrics"), std::string::npos) << md;
}

TEST(BenchCli, EveryRequestFailingExitsNonZeroWithReasonsOnConsoleAndInReport) {
  SERVELAB_REQUIRE_BINARY();
  ScriptedServer down([](tcp::socket& s, const std::string&) {
    write_all(s, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nConnection: close\r\n"
                 "Content-Length: 29\r\n\r\n{\"error\":{\"message\":\"down!\"}}");
  });
  TempDir tmp;
  const std::string out = tmp.file("out");
  const CliResult r = run_servelab({"bench", "--url", down.url(), "--rate", "inf", "--n", "3", "--no-preflight", "--out", out,
                                    "--no-plots"},
                                   tmp);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("3 of 3 requests failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 x HTTP 500: down!"), std::string::npos) << r.output;
  EXPECT_NE(read_text(out + "/report.md").find("3 x HTTP 500: down!"), std::string::npos);
}

TEST(BenchCli, ConflictingAndBadFlagsAreNamed) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string url = "http://127.0.0.1:1";
  CliResult r = run_servelab({"bench", "--url", url, "--rate", "4", "--concurrency", "2"}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--rate excludes --concurrency"), std::string::npos) << r.output;
  r = run_servelab({"bench", "--url", url, "--n", "4", "--duration", "1"}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--n excludes --duration"), std::string::npos) << r.output;
  r = run_servelab({"bench", "--url", url, "--concurrency", "0"}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--concurrency"), std::string::npos) << r.output;
  r = run_servelab({"bench", "--url", url, "--rate", "-3"}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--rate: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("bench:9"), std::string::npos) << r.output;
  r = run_servelab({"bench", "--url", url, "--timeout", "5", "--balance", "fastest"}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--balance: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("bench:1"), std::string::npos) << r.output;
}

TEST(BenchCli, VllmFlagsAndItsResultJson) {
  SERVELAB_REQUIRE_BINARY();
  FakeVllm vllm;
  TempDir tmp;
  const std::string out = tmp.file("out");
  const CliResult r = run_servelab({"bench", "--base-url", vllm.server.url(), "--endpoint", "/v1/completions", "--model", "q",
                                    "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", "3",
                                    "--random-range-ratio", "0.5", "--num-prompts", "4", "--request-rate", "inf",
                                    "--max-concurrency", "2", "--goodput", "ttft:1000", "--goodput", "tpot:1000",
                                    "--metric-percentiles", "50,99", "--percentile-metrics", "ttft,tpot,itl,e2el",
                                    "--extra-body", "{\"top_k\": 20}", "--save-result", "--result-dir", tmp.file("res"),
                                    "--result-filename", "r.json", "--out", out, "-q", "--no-plots"},
                                   tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(read_text(tmp.file("res") + "/r.json"));
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["num_prompts"], 4);
  EXPECT_EQ(j["max_concurrency"], 2);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["total_output_tokens"], 12);
  for (const char* k : {"mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "p50_e2el_ms", "request_goodput", "ttfts", "itls"})
    EXPECT_TRUE(j.contains(k)) << k;
  const auto runs = nlohmann::json::parse(read_text(out + "/runs.json"));
  EXPECT_EQ(runs["runs"][0]["config"]["max_concurrency"], 2);
}

}  // namespace
}  // namespace servelab::cli_test
