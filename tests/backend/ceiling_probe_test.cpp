// The cpu ceiling probe returns finite positive figures and says how it measured them; bad
// options are refused naming the field. (No figure is asserted: speed is the benchmarks'.)
#include <cmath>

#include <gtest/gtest.h>

#include "engine/backend/ceiling_probe.h"

namespace servelab {
namespace ceiling_probe_test {

TEST(CeilingProbe, SmallProbeGivesPositiveFiguresAndSaysHow) {
  CeilingProbeOptions o;
  o.threads = 1;
  o.copy_mib = 4;
  o.gemm_n = 64;
  o.repeats = 2;
  const ProbedCeilings c = probe_cpu_ceilings(o);
  EXPECT_TRUE(std::isfinite(c.copy_bytes_s) && c.copy_bytes_s > 0);
  EXPECT_TRUE(std::isfinite(c.gemm_flops) && c.gemm_flops > 0);
  EXPECT_NE(c.detail.find("sgemm 64^3"), std::string::npos) << c.detail;
  EXPECT_NE(c.detail.find("1 threads"), std::string::npos) << c.detail;
}

TEST(CeilingProbe, BadOptionsNameTheField) {
  CeilingProbeOptions o;
  o.gemm_n = 3;
  try {
    probe_cpu_ceilings(o);
    FAIL() << "gemm_n 3 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gemm_n"), std::string::npos) << e.what();
  }
}

}  // namespace ceiling_probe_test
}  // namespace servelab
