// Reading a server's Prometheus /metrics: servelab's and vLLM's names, SGLang's and TGI's where
// they differ, summed over label sets; the engine named from the names.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loadgen/http/server_metrics.h"
#include "loadgen/http/server_probe.h"
#include "loadgen/target.h"

namespace servelab::http_load {
namespace {

TEST(ServerMetrics, VllmNamesSummedOverModels) {
  const std::string text =
      "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"a\"} 3.0\n"
      "vllm:num_requests_running{engine=\"1\",model_name=\"a\"} 2.0\n"
      "vllm:num_requests_waiting{model_name=\"a\"} 7\n"
      "vllm:gpu_cache_usage_perc{model_name=\"a\"} 0.25\n"
      "vllm:num_preemptions_total{model_name=\"a\"} 4\n"
      "vllm:time_to_first_token_seconds_bucket{le=\"0.005\",model_name=\"a\"} 1\n"
      "vllm:time_to_first_token_seconds_count{model_name=\"a\"} 10\n"
      "vllm:time_to_first_token_seconds_sum{model_name=\"a\"} 1.5\n"
      "vllm:spec_decode_num_drafts_total{model_name=\"a\"} 12\n"
      "vllm:spec_decode_num_draft_tokens_total{model_name=\"a\"} 36\n"
      "vllm:spec_decode_num_accepted_tokens_total{model_name=\"a\"} 20\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"a\",position=\"0\"} 10\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"1\",model_name=\"a\",position=\"0\"} 2\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"a\",position=\"2\"} 3\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"a\",xposition=\"1\"} 99\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"a\",position=\"x\"} 99\n";
  const ServerSample s = parse_server_metrics(text);
  EXPECT_EQ(s.engine, "vLLM");
  EXPECT_EQ(s.running, 5.0);
  EXPECT_EQ(s.waiting, 7.0);
  EXPECT_EQ(s.kv_usage, 0.25);
  EXPECT_EQ(s.preemptions, 4.0);
  EXPECT_EQ(s.ttft_count, 10.0);
  EXPECT_EQ(s.ttft_sum_s, 1.5);
  EXPECT_EQ(s.spec_drafts, 12.0);
  EXPECT_EQ(s.spec_draft_tokens, 36.0);
  EXPECT_EQ(s.spec_accepted_tokens, 20.0);  // the per-position counter is not summed into it
  // By position, summed over the other labels; a label that only ends in "position" or a position
  // that is not a number is not one.
  EXPECT_EQ(s.spec_accepted_per_pos, (std::vector<double>{12.0, 0.0, 3.0}));
  const auto j = nlohmann::json::parse(server_sample_line("http@4", "http://h:1", 0.25, s));
  EXPECT_EQ(j["spec_accepted_per_pos"], nlohmann::json::parse("[12.0, 0.0, 3.0]"));
  EXPECT_EQ(j["running"], 5.0);
  EXPECT_EQ(j["engine"], "vLLM");
}

TEST(ServerMetrics, SglangTgiAndServelabNames) {
  const ServerSample g = parse_server_metrics("sglang:num_running_reqs{x=\"1\"} 2\nsglang:num_queue_reqs 3\nsglang:token_usage 0.5\n");
  EXPECT_EQ(g.engine, "SGLang");
  EXPECT_EQ(g.running, 2.0);
  EXPECT_EQ(g.waiting, 3.0);
  EXPECT_EQ(g.kv_usage, 0.5);
  EXPECT_FALSE(g.preemptions);
  const ServerSample t = parse_server_metrics("tgi_batch_current_size 6\ntgi_queue_size 1\n");
  EXPECT_EQ(t.engine, "TGI");
  EXPECT_EQ(t.running, 6.0);
  EXPECT_FALSE(t.kv_usage);
  const ServerSample s = parse_server_metrics("servelab:num_requests_running{model_name=\"tiny\"} 1\n");
  EXPECT_EQ(s.engine, "servelab");
  EXPECT_EQ(s.running, 1.0);
}

TEST(Endpoint, FullEndpointUrlIsUnderstood) {
  Endpoint e = parse_endpoint("http://127.0.0.1:18000/v1/completions");
  EXPECT_EQ(e.prefix, "");
  EXPECT_EQ(e.api, TargetApi::completions);
  e = parse_endpoint("http://h:8000/proxy/v1/chat/completions/");
  EXPECT_EQ(e.prefix, "/proxy");
  EXPECT_EQ(e.api, TargetApi::chat);
  e = parse_endpoint("http://h:8000/v1");
  EXPECT_EQ(e.prefix, "");
  EXPECT_FALSE(e.api);
}

}  // namespace
}  // namespace servelab::http_load
