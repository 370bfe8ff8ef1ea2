// Prometheus text of ServerMetrics: bucket labels as PromQL matches them.
#include <gtest/gtest.h>

#include "server/metrics.h"

namespace servelab::server {
namespace {

TEST(MetricsRender, BucketBoundsPrintShortestExact) {
  Histogram h({0.001, 0.005, 0.1, 2.5, 80.0});
  h.observe(0.004);
  std::string out;
  h.render(out, "x", "m=\"a\"");
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"0.005\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("le=\"0.1\""), std::string::npos) << out;
  EXPECT_NE(out.find("le=\"80\""), std::string::npos) << out;
  EXPECT_EQ(out.find("0.0050000"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum{m=\"a\"} 0.004\n"), std::string::npos) << out;
}

TEST(MetricsRender, ServerTtftHistogramUsesVllmBounds) {
  ServerMetrics m("tiny");
  const std::string out = m.render();
  EXPECT_NE(out.find("servelab:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.005\"} 0"),
            std::string::npos);
  EXPECT_NE(out.find("servelab:kv_cache_usage_perc{model_name=\"tiny\"} 0\n"), std::string::npos);
}

TEST(MetricsRender, LoraRequestsInfoIsVllmsGaugeWithTheAdaptersInItsLabels) {
  ServerMetrics m("tiny");
  EXPECT_EQ(m.render().find("lora_requests_info"), std::string::npos) << "not without LoRA";
  m.set_lora_requests({"math", "sql"}, {"chat\"x"}, 4);
  const std::string out = m.render();
  const size_t at = out.find("servelab:lora_requests_info{model_name=\"tiny\",max_lora=\"4\","
                             "running_lora_adapters=\"math,sql\",waiting_lora_adapters=\"chat\\\"x\"} ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_NE(out.find("# TYPE servelab:lora_requests_info gauge\n"), std::string::npos);
  const double t = std::stod(out.substr(out.find("} ", at) + 2));  // when it was taken, Unix seconds
  EXPECT_GT(t, 1.7e9);
  EXPECT_EQ(m.snapshot().lora_running, (std::vector<std::string>{"math", "sql"}));
  // Finished requests by adapter: counted per name, the base model's left out.
  FinishedTimings done;
  done.n_prompt = 7;
  done.n_output = 3;
  done.finished_reason = "length";
  done.lora = "sql";
  m.on_finished(done);
  m.on_finished(done);
  done.lora = "";
  m.on_finished(done);
  const std::string after = m.render();
  EXPECT_NE(after.find("# TYPE servelab:lora_request_success_total counter\n"), std::string::npos) << after;
  EXPECT_NE(after.find("servelab:lora_request_success_total{model_name=\"tiny\",lora_name=\"sql\"} 2\n"), std::string::npos);
  EXPECT_NE(after.find("servelab:lora_prompt_tokens_total{model_name=\"tiny\",lora_name=\"sql\"} 14\n"), std::string::npos);
  EXPECT_NE(after.find("servelab:lora_generation_tokens_total{model_name=\"tiny\",lora_name=\"sql\"} 6\n"), std::string::npos);
  EXPECT_EQ(after.find("lora_name=\"\""), std::string::npos);
  EXPECT_EQ(m.snapshot().lora_finished.at("sql").n_requests, 2u);
}

TEST(MetricsRender, SpecDecodeCountersSumStepsUnderVllmNames) {
  ServerMetrics m("tiny");
  EXPECT_EQ(m.render().find("spec_decode"), std::string::npos);  // none before a draft
  m.add_spec_decode(2, 6, 4, {2, 1, 1});
  m.add_spec_decode(1, 2, 1, {1, 0});
  const std::string out = m.render();
  EXPECT_NE(out.find("servelab:spec_decode_num_drafts_total{model_name=\"tiny\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("servelab:spec_decode_num_draft_tokens_total{model_name=\"tiny\"} 8\n"), std::string::npos);
  EXPECT_NE(out.find("servelab:spec_decode_num_accepted_tokens_total{model_name=\"tiny\"} 5\n"), std::string::npos);
  EXPECT_NE(out.find("servelab:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"0\"} 3\n"),
            std::string::npos);
  EXPECT_NE(out.find("servelab:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"2\"} 1\n"),
            std::string::npos);
  EXPECT_EQ(m.snapshot().spec_num_accepted_tokens_per_pos, (std::vector<uint64_t>{3, 1, 1}));
}

}  // namespace
}  // namespace servelab::server
