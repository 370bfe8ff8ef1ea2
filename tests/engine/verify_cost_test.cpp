// The profiled cost model's verification term (engine/backend/cost_model.h): steps in which
// sequences score k + 1 drawn rows (speculative verification) priced from profile points of that
// shape, V(verify_rows) + a_verify · verify_pairs on top of the other terms, fitted after them.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/backend/cost_model.h"
#include "tests/engine/step_shapes.h"
#include "engine/backend/make_backend.h"

namespace servelab {
namespace verify_cost_test {  // named, not anonymous: a unity batch shares one translation unit

using test_shapes::decode_shape;
using test_shapes::prefill_shape;

/// `batch` sequences each verifying k drafts at `context` (k + 1 rows, all drawn).
StepShape verify_at(int batch, int k, int context) {
  StepShape s;
  const int rows = k + 1, end = context + rows;
  const double pairs = double(rows) * context + 0.5 * rows * (rows + 1.0);
  s.n_tokens = s.n_sampled = int64_t(batch) * rows;
  s.n_seqs = batch;
  s.sum_context = int64_t(batch) * end;
  s.max_context = end;
  s.prefill_pairs = s.attention_pairs = s.verify_pairs = batch * pairs;
  s.verify_rows = s.n_tokens;
  return s;
}

// The model class itself: a non-linear matrix term over rows, a cost per draw, attention by prefill
// pairs and decode context; verification adds V(rows) (non-linear) and 3e-8 a verification pair.
double matrix_s(double rows) { return 0.004 + 2e-4 * rows + 3e-3 * std::sqrt(rows); }
double base_s(const StepShape& s) {
  return matrix_s(double(s.n_rows())) + 5e-4 * s.n_sampled + 2e-8 * (s.prefill_pairs - s.verify_pairs) +
         7e-7 * s.decode_context;
}
double verify_extra_s(double rows) { return 1e-4 * rows + 2e-3 * std::log1p(rows); }
double true_s(const StepShape& s) { return base_s(s) + verify_extra_s(double(s.verify_rows)) + 3e-8 * s.verify_pairs; }

std::vector<TimedStep> base_profile() {
  std::vector<TimedStep> steps;
  for (int t : {16, 32, 64, 128, 256}) steps.push_back({prefill_shape(t, 0), 0});
  for (int b : {1, 2, 4, 8, 16})
    for (int c : {32, 128, 256}) steps.push_back({decode_shape(b, c), 0});
  for (int t : {4, 32, 128})
    for (int c : {32, 128, 256}) steps.push_back({prefill_shape(t, c), 0});
  for (TimedStep& s : steps) s.step_s = true_s(s.shape);
  return steps;
}

std::vector<TimedStep> verification_points() {  // k = 3 at batches 1, 2, 4, 8 and three contexts
  std::vector<TimedStep> steps;
  for (int b : {1, 2, 4, 8})
    for (int c : {32, 128, 256}) steps.push_back({verify_at(b, 3, c), 0});
  for (TimedStep& s : steps) s.step_s = true_s(s.shape);
  return steps;
}

TEST(VerificationCost, APointOfKPlus1RowsAReproducedAndABatchBetweenIsPricedBetweenItsNeighbours) {
  std::vector<TimedStep> all = base_profile();
  for (const TimedStep& t : verification_points()) all.push_back(t);
  const ProfiledStepModel m = ProfiledStepModel::fit(all);
  ASSERT_TRUE(m.has_verification());
  EXPECT_EQ(m.verify_knots(), (std::vector<double>{4, 8, 16, 32}));
  EXPECT_NEAR(m.s_per_verify_pair(), 3e-8, 1e-11);
  for (const TimedStep& t : verification_points()) {
    EXPECT_TRUE(m.inside(t.shape));
    EXPECT_NEAR(m.predict_clamped(t.shape), t.step_s, 1e-9 * t.step_s) << t.shape.n_seqs << " seqs";
  }
  // Batch 3 (12 rows) at context 128: between batch 2 and 4, V and M interpolated linearly.
  const double lo = m.predict_clamped(verify_at(2, 3, 128)), hi = m.predict_clamped(verify_at(4, 3, 128));
  const double mid = m.predict_clamped(verify_at(3, 3, 128));
  EXPECT_GT(mid, lo);
  EXPECT_LT(mid, hi);
  const StepShape s3 = verify_at(3, 3, 128);
  const double v_mid = 0.5 * (verify_extra_s(8) + verify_extra_s(16)), m_mid = 0.5 * (matrix_s(8) + matrix_s(16));
  EXPECT_NEAR(mid, m_mid + 5e-4 * 12 + v_mid + 3e-8 * s3.verify_pairs, 1e-9);
  // Fewer rows than the first knot: V scales down to V(0) = 0 (a sequence verifying 1 draft).
  const StepShape one = verify_at(1, 1, 128);
  EXPECT_NEAR(m.predict_clamped(one), matrix_s(2) + 5e-4 * 2 + 0.5 * verify_extra_s(4) + 3e-8 * one.verify_pairs, 1e-9);
}

TEST(VerificationCost, TheOtherTermsAreTheSameWithOrWithoutVerificationPoints) {
  const ProfiledStepModel base = ProfiledStepModel::fit(base_profile());
  std::vector<TimedStep> all = base_profile();
  for (const TimedStep& t : verification_points()) all.push_back({t.shape, t.step_s * 1.7});  // any verify times
  const ProfiledStepModel with = ProfiledStepModel::fit(all);
  EXPECT_EQ(with.knots(), base.knots());
  EXPECT_EQ(with.knot_seconds(), base.knot_seconds());
  EXPECT_EQ(with.s_per_sampled(), base.s_per_sampled());
  EXPECT_EQ(with.s_per_prefill_pair(), base.s_per_prefill_pair());
  EXPECT_EQ(with.s_per_decode_context(), base.s_per_decode_context());
  for (const TimedStep& t : base_profile()) EXPECT_EQ(with.predict_clamped(t.shape), base.predict_clamped(t.shape));
}

TEST(VerificationCost, WithoutVerificationPointsAVerifyingSequenceIsPricedAsAPrefillChunk) {
  const ProfiledStepModel m = ProfiledStepModel::fit(base_profile());
  EXPECT_FALSE(m.has_verification());
  const StepShape v = verify_at(2, 3, 128);
  StepShape as_chunk = v;
  as_chunk.verify_rows = 0;
  as_chunk.verify_pairs = 0.0;
  EXPECT_EQ(m.predict_clamped(v), m.predict_clamped(as_chunk));
  EXPECT_EQ(m.inside(v), m.inside(as_chunk));
  // The prefill-chunk price misses the verification's own cost here (what the term is for).
  EXPECT_LT(m.predict_clamped(v), true_s(v));
}

TEST(VerificationCost, BeyondTheVerificationPointsTheRooflineScalesTheEdge) {
  std::vector<TimedStep> all = base_profile();
  for (const TimedStep& t : verification_points()) all.push_back(t);
  SimCostModel cost;
  cost.kind = SimCostModel::Kind::profile;
  cost.device = SimDevice::preset("cpu-2core");
  cost.profiled = ProfiledStepModel::fit(all);
  const ModelConfig model = resolve_model_config("tiny");
  CostSource used = CostSource::roofline;
  const double in_grid = cost.step_seconds(model, verify_at(8, 3, 128), &used);
  EXPECT_EQ(used, CostSource::profile);
  const double beyond = cost.step_seconds(model, verify_at(12, 3, 128), &used);  // 48 rows > 32
  EXPECT_EQ(used, CostSource::profile_roofline);
  EXPECT_GT(beyond, in_grid);
}

TEST(VerificationCost, ASampleWithMoreVerifyRowsThanRowsIsRefused) {
  std::vector<TimedStep> all = base_profile();
  TimedStep bad = verification_points().front();
  bad.shape.verify_rows = bad.shape.n_tokens + 1;
  all.push_back(bad);
  EXPECT_THROW(ProfiledStepModel::fit(all), std::invalid_argument);
}

}  // namespace verify_cost_test
}  // namespace servelab
