// A profile measured on one GPU, priced on another (issue 28: predict a GPU the user has not
// profiled): with backend.sim_retarget every sample keeps a fixed part (the profile's smallest
// excess over its own roofline bound) and scales the rest by its bound on the new device over the
// old, so a decode (bandwidth bound) of an H100 profile runs 3.35 / 4.8 as long beyond that part on
// an H200 and a long prefill (compute bound, the same tensor cores) as long; without it another
// device is refused, naming the key.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/backend/make_backend.h"
#include "engine/backend/sim_backend.h"
#include "tests/engine/engine_test_support.h"
#include "tests/engine/profile_fixture.h"

namespace servelab {
namespace sim_retarget_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace profile_fixture;
using test_shapes::decode_shape;
using test_shapes::prefill_shape;

TEST(SimRetarget, RetargetStepSecondsKeepsTheFixedPartAndScalesTheRest) {
  EXPECT_DOUBLE_EQ(retarget_step_seconds(5e-3, 2.0, 1.0, 1e-3), 1e-3 + 4e-3 * 0.5);
  EXPECT_DOUBLE_EQ(retarget_step_seconds(5e-4, 2.0, 1.0, 1e-3), 5e-4) << "the fixed part is capped at the step";
  EXPECT_DOUBLE_EQ(retarget_step_seconds(5e-3, 0.0, 1.0, 1e-3), 5e-3) << "no bound: as measured";
}

TEST(SimRetarget, AnH100ProfileOnAnH200ScalesDecodesByBandwidthAndLongPrefillsNotAtAll) {
  const ModelConfig m = preset("llama2-7b");
  // Steps of an H100 (the times need only be plausible: each is retimed by its own bound).
  std::vector<TimedStep> steps;
  for (int b : {1, 8, 32})
    for (int c : {128, 512}) steps.push_back({decode_shape(b, c), 0.0});
  for (int t : {1024, 2048}) steps.push_back({prefill_shape(t, 0), 0.0});
  const SimDevice h100 = SimDevice::preset("h100"), h200 = SimDevice::preset("h200");
  // The bounds with the profile's K/V element (4 bytes in profile_text), as the loaded model's
  // devices have it.
  SimDevice h100_kv = h100, h200_kv = h200;
  h100_kv.kv_dtype_bytes = h200_kv.kv_dtype_bytes = 4;
  for (TimedStep& s : steps) s.step_s = 1.15 * roofline_seconds(m, h100_kv, 1, s.shape);
  TempFile f(profile_text(m, steps, "h100"));
  const SimCostModel on_h100 = SimCostModel::from_profile_json(f.path(), m);
  const SimCostModel on_h200 = SimCostModel::from_profile_json(f.path(), m, h200, 1, true);
  EXPECT_EQ(on_h200.device.name, "h200");
  EXPECT_NE(on_h200.source.find("retargeted to h200"), std::string::npos) << on_h200.source;
  // The fixed part: the profile's smallest excess over its own bound.
  const RooflineTerms from_terms = RooflineTerms::of(m, h100_kv, 1), to_terms = RooflineTerms::of(m, h200_kv, 1);
  double o = 1.0;
  for (const TimedStep& s : steps) o = std::min(o, s.step_s - roofline_bound(from_terms, s.shape).seconds());
  ASSERT_GT(o, h100.step_overhead_s);
  for (const TimedStep& s : steps) {
    const double from = roofline_bound(from_terms, s.shape).seconds(), to = roofline_bound(to_terms, s.shape).seconds();
    const double want = retarget_step_seconds(s.step_s, from, to, o);
    EXPECT_NEAR(on_h200.step_seconds(m, s.shape), want, 1e-9 * want) << s.shape.n_rows() << " rows";
  }
  // A decode of 8 at 512: bandwidth bound on both, so its time beyond the fixed part scales by 3.35 / 4.8.
  const StepShape d = decode_shape(8, 512);
  EXPECT_NEAR(on_h200.step_seconds(m, d) - o, (on_h100.step_seconds(m, d) - o) * 3.35 / 4.8, 1e-9);
  // A prefill of 2048: compute bound on both (989 TFLOP/s), unchanged.
  const StepShape p = prefill_shape(2048, 0);
  EXPECT_NEAR(on_h200.step_seconds(m, p), on_h100.step_seconds(m, p), 1e-9);

  // Without retarget another device is refused, and the error names the key; a scenario's spec
  // carries it through to the sim backend.
  try {
    SimCostModel::from_profile_json(f.path(), m, h200, 1);
    ADD_FAILURE() << "another device was taken without sim_retarget";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("sim_retarget"), std::string::npos) << e.what();
  }
  BackendSpec spec;
  spec.kind = BackendKind::sim;
  spec.model = "llama2-7b";
  spec.sim_profile = f.path();
  spec.sim_device = h200;
  spec.sim_device_set = true;
  EXPECT_THROW(make_backend(spec), std::runtime_error);
  spec.sim_retarget = true;
  auto sim = make_backend(spec);
  EXPECT_EQ(dynamic_cast<const SimBackend&>(*sim).cost().device.name, "h200");
}

}  // namespace sim_retarget_test
}  // namespace servelab
