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

}  // namespace
}  // namespace servelab::server
