// Rate plots: a concurrency sweep's closed-loop runs are placed at the rate they achieved.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <sstream>

#include "analysis/plots.h"

namespace servelab::analysis {
namespace {

TEST(PlotRate, ClosedLoopRunsArePlottedAtTheirAchievedRate) {
  Summary s;
  for (int c : {4, 1}) {
    RunSummary r;
    r.info.label = "continuous-paged@c" + std::to_string(c);
    r.info.batching = "continuous";
    r.info.kv = "paged";
    r.info.rate = std::numeric_limits<double>::infinity();  // closed loop: no offered rate
    r.info.config = {{"concurrency", c}};
    r.metrics.request_throughput = 2.5 * c;
    s.runs.push_back(r);
  }
  const std::string dir = (std::filesystem::path(::testing::TempDir()) / "plot_rate").string();
  PlotOptions o;
  o.gnuplot = "/bin/true";  // writes the data files; draws nothing
  write_plots(dir, s, {}, {}, o);
  std::ifstream in(dir + "/plots/rate_continuous-paged.dat");
  ASSERT_TRUE(in) << "no rate data file";
  std::string line;
  std::vector<double> xs;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    double x = 0;
    std::istringstream(line) >> x;
    xs.push_back(x);
  }
  EXPECT_EQ(xs, (std::vector<double>{2.5, 10.0}));  // ascending achieved rate
}

TEST(PlotRate, LatencyAxisGoesLogWhenP50sSpanOver100xOrTheSloIsFarAbove) {
  EXPECT_FALSE(latency_log_scale(800, 40, 60, 200));      // close p50s, the SLO within 5x of the p99s
  EXPECT_TRUE(latency_log_scale(2000, 40, 24000, 58000));  // static batching's queueing beside continuous
  EXPECT_TRUE(latency_log_scale(5000, 40, 60, 200));      // the SLO line far above the data
  EXPECT_FALSE(latency_log_scale(2000, 0, 0, 0));         // no data
  // Through write_plots: the TTFT figure of a continuous and a static strategy 600x apart.
  Summary s;
  s.slo.ttft_ms = 2000;
  s.slo.tpot_ms = 100;
  for (const char* b : {"continuous", "static"})
    for (double rate : {4.0, 12.0}) {
      RunSummary r;
      r.info.label = std::string(b) + "@" + std::to_string(int(rate));
      r.info.batching = b;
      r.info.kv = "paged";
      r.info.rate = rate;
      const bool slow = std::string(b) == "static";
      r.metrics.ttft_ms.p50 = slow ? 24000 : 40;
      r.metrics.ttft_ms.p99 = slow ? 43000 : 130;
      r.metrics.tpot_ms.p50 = 25;
      r.metrics.tpot_ms.p99 = 30;
      s.runs.push_back(r);
    }
  const std::string dir = (std::filesystem::path(::testing::TempDir()) / "plot_log").string();
  PlotOptions o;
  o.gnuplot = "/bin/true";
  write_plots(dir, s, {}, {}, o);
  std::ifstream in(dir + "/plots/plots.gp");
  const std::string gp((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto ttft = gp.find("TTFT vs request rate"), tpot = gp.find("TPOT vs request rate");
  ASSERT_NE(ttft, std::string::npos) << gp;
  ASSERT_NE(tpot, std::string::npos) << gp;
  EXPECT_NE(gp.substr(ttft, 300).find("set logscale y"), std::string::npos) << gp.substr(ttft, 300);
  EXPECT_EQ(gp.substr(tpot, 300).find("set logscale y"), std::string::npos) << gp.substr(tpot, 300);
}

}  // namespace
}  // namespace servelab::analysis
