// The probe behind `servelab profile`'s host overhead: every burst runs to its end and the
// points are fitted (shapes of the result only: its figures are wall-clock).
#include <gtest/gtest.h>

#include <cmath>

#include "loadgen/host_overhead_probe.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace {

TEST(HostOverheadProbe, RunsEveryBurstToTheEndAndFitsItsPoints) {
  const HostOverheadProbe p = measure_host_overhead(enginetest::micro_model(), {1, 4, 16}, 1);
  ASSERT_EQ(p.points.size(), 3u);
  for (const HostOverheadPoint& pt : p.points) {
    EXPECT_GT(pt.n_steps, 64) << pt.max_num_seqs;  // 4 waves of 64 output tokens at least
    EXPECT_GE(pt.mean_seqs, 1.0);
    EXPECT_LE(pt.mean_seqs, pt.max_num_seqs);
    EXPECT_TRUE(std::isfinite(pt.step_s));
    EXPECT_GE(pt.step_s, 0.0);
  }
  EXPECT_NEAR(p.points[0].mean_seqs, 1.0, 1e-12);  // a cap of 1 runs one sequence a step
  EXPECT_GT(p.points[2].mean_seqs, p.points[1].mean_seqs);
  EXPECT_GE(p.fitted.per_step_s, 0.0);
  EXPECT_GE(p.fitted.per_seq_s, 0.0);
  EXPECT_THROW(measure_host_overhead(enginetest::micro_model(), {0}, 1), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
