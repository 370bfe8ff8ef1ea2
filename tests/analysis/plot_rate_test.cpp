// Rate plots: a concurrency sweep's closed-loop runs are placed at the rate they achieved.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
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

}  // namespace
}  // namespace servelab::analysis
