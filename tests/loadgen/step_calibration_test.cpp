// Calibration (loadgen/step_calibration.h): a serving run's steps folded into a profile as samples,
// so the refitted model prices the run's own step mix as it ran; warm-up, adapter and swap steps
// left out; a sustained-load probe's factor taken back out of each step first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "engine/backend/sim_sustained.h"
#include "loadgen/step_calibration.h"
#include "tests/engine/profile_fixture.h"

namespace servelab {
namespace step_calibration_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace profile_fixture;

/// A chunk of `chunk` rows after `start` cached tokens beside `decodes` decodes at `context`.
StepShape mixed_shape(int chunk, int start, int decodes, int context) {
  StepShape s = test_shapes::prefill_shape(chunk, start);
  const StepShape d = test_shapes::decode_shape(decodes, context);
  s.n_tokens += d.n_tokens;
  s.n_sampled += d.n_sampled;
  s.n_seqs += d.n_seqs;
  s.sum_context += d.sum_context;
  s.max_context = std::max(s.max_context, d.max_context);
  s.decode_context = d.decode_context;
  s.attention_pairs += d.attention_pairs;
  return s;
}

/// The synthetic profile's own cost (profile_fixture::synthetic_profile's formula).
double grid_truth(const StepShape& s) {
  const double rows = double(s.n_rows());
  return 0.004 + 2e-4 * rows + 3e-3 * std::sqrt(rows) + 5e-4 * s.n_sampled + 2e-8 * s.prefill_pairs + 7e-7 * s.decode_context;
}

struct Fixture {
  ModelConfig model = preset("tiny");
  TempFile file{profile_text(model, synthetic_profile())};
  SimCostModel cost = SimCostModel::from_profile_json(file.path(), model);
  nlohmann::ordered_json profile = nlohmann::ordered_json::parse(profile_text(model, synthetic_profile()));
};

/// A serving run: decodes and mixed steps back to back from t = 0, mixed steps 10% dearer than the
/// grid's formula (what the grid's isolated points miss), decodes as the grid has them.
std::vector<RecordedStep> serving_run(const std::string& run, double mixed_over = 1.10) {
  std::vector<RecordedStep> steps;
  double t = 0.0;
  for (int i = 0; i < 120; ++i) {
    RecordedStep r;
    r.run = run;
    const bool mixed = i % 3 == 0;
    r.timing.shape = mixed ? mixed_shape(60 + 4 * (i % 5), 32 * (i % 4), 2 + i % 6, 96 + 8 * (i % 7))
                           : test_shapes::decode_shape(2 + i % 12, 64 + 16 * (i % 9));
    r.timing.measured_s = grid_truth(r.timing.shape) * (mixed ? mixed_over : 1.0);
    r.timing.start_s = t;
    t += r.timing.measured_s;
    steps.push_back(r);
  }
  return steps;
}

TEST(StepCalibration, TheRefittedProfilePricesTheRunsMixedStepsAsTheyRan) {
  Fixture f;
  const std::vector<RecordedStep> run = serving_run("continuous@4");
  CalibrationOptions o;
  o.skip_s = 0.0;
  const CalibrationSummary sum = add_calibration_samples(f.profile, run, f.cost, f.model, o);
  EXPECT_EQ(sum.used, 120);
  EXPECT_FALSE(sum.de_heated);
  ASSERT_EQ(f.profile["calibration"].size(), 1u);
  EXPECT_EQ(f.profile["calibration"][0]["samples"], 120);
  EXPECT_EQ(f.profile["samples"].back()["source"], "calibration");
  const TempFile calibrated(f.profile.dump());
  const SimCostModel after = SimCostModel::from_profile_json(calibrated.path(), f.model);
  double before_err = 0.0, after_err = 0.0;
  int n = 0;
  for (const RecordedStep& r : run) {
    if (std::string(calibration_phase(r.timing.shape)) != "mixed") continue;
    before_err += f.cost.step_seconds(f.model, r.timing.shape) / r.timing.measured_s - 1.0;
    after_err += after.step_seconds(f.model, r.timing.shape) / r.timing.measured_s - 1.0;
    ++n;
  }
  ASSERT_EQ(n, 40);
  EXPECT_LT(before_err / n, -0.07);  // the grid alone prices them ~9% low
  EXPECT_NEAR(after_err / n, 0.0, 0.03);
}

TEST(StepCalibration, WarmUpAdapterAndSwapStepsAreLeftOutAndEachRunStartsAgain) {
  Fixture f;
  std::vector<RecordedStep> steps = serving_run("a@1");
  const std::vector<RecordedStep> second = serving_run("b@2");
  steps.insert(steps.end(), second.begin(), second.end());
  steps[70].timing.lora.push_back({1, 0, 1000});
  steps[71].swap_bytes = 4096;
  CalibrationOptions o;
  o.skip_s = 0.2;
  int64_t warm = 0;
  for (const RecordedStep& r : steps) warm += r.timing.start_s < 0.2;
  ASSERT_GT(warm, 4);  // in both runs
  const CalibrationSummary sum = add_calibration_samples(f.profile, steps, f.cost, f.model, o);
  EXPECT_EQ(sum.skipped_warmup, warm);
  EXPECT_EQ(sum.skipped_lora, 1);
  EXPECT_EQ(sum.skipped_swap, 1);
  EXPECT_EQ(sum.used, int64_t(steps.size()) - warm - 2);
  ASSERT_EQ(sum.added.size(), size_t(sum.used));
  EXPECT_EQ(std::count(sum.added.begin(), sum.added.end(), size_t(70)), 0);  // the adapter step
  EXPECT_EQ(std::count(sum.added.begin(), sum.added.end(), size_t(72)), 1);
  EXPECT_EQ(f.profile["calibration"][0]["skipped"]["warmup"], warm);
}

TEST(StepCalibration, ASustainedLoadProbesFactorIsTakenBackOutOfEachStep) {
  Fixture f;
  SustainedLoad probe;  // heavy steps 1.2x the grid once the GPU is hot
  probe.heavy = {test_shapes::prefill_shape(256, 0), 0.05, 0.048, 0.06};
  probe.decode = {test_shapes::decode_shape(8, 128), 0.01, 0.0099, 0.0101};
  probe.tau_s = 0.05;
  probe.seconds = 2.0;
  f.cost.sustained = std::make_shared<const SustainedLoad>(probe);
  // Back-to-back heavy steps that ran exactly as the sim's state prices them.
  const RooflineTerms terms = RooflineTerms::of(f.model, f.cost.device, 1);
  SustainedState state(probe, terms);
  const StepShape heavy = test_shapes::prefill_shape(256, 0);
  const double grid = f.cost.step_seconds(f.model, heavy);
  std::vector<RecordedStep> steps;
  double t = 0.0;
  for (int i = 0; i < 200; ++i) {
    RecordedStep r;
    r.run = "hot@9";
    r.timing.shape = heavy;
    r.timing.start_s = t;
    r.timing.measured_s = state.price(t, grid, heavy);
    t += r.timing.measured_s;
    steps.push_back(r);
  }
  ASSERT_GT(steps.back().timing.measured_s, 1.01 * grid);  // the run did heat up
  CalibrationOptions o;
  o.skip_s = 0.0;
  const CalibrationSummary sum = add_calibration_samples(f.profile, steps, f.cost, f.model, o);
  EXPECT_TRUE(sum.de_heated);
  EXPECT_GT(sum.max_factor, 1.01);
  for (size_t i = f.profile["samples"].size() - 200; i < f.profile["samples"].size(); ++i)
    EXPECT_NEAR(f.profile["samples"][i]["step_s"].get<double>(), grid, 1e-9 * grid) << i;
}

/// Decodes of 8 sequences at a mean context of 100 whose longest holds 180 (serving's spread).
StepShape spread_decode() {
  StepShape s = test_shapes::decode_shape(8, 100);
  s.max_context = 180;
  return s;
}

TEST(StepCalibration, ServedDecodesCheaperThanTheGridPullTheirBucketDownWhereGridSpreadPointsCannot) {
  Fixture f;
  f.profile["decode_row_buckets"] = {1, 2, 4, 8, 16};
  const TempFile bucketed(f.profile.dump());
  const SimCostModel grid = SimCostModel::from_profile_json(bucketed.path(), f.model);
  const double grid_s = grid.step_seconds(f.model, spread_decode());
  // Grid points of spread contexts (no "source") 5% under the grid's price: a_spread stays >= 0.
  nlohmann::ordered_json points = f.profile;
  for (int i = 0; i < 4; ++i)
    points["samples"].push_back({{"phase", "decode"}, {"n_seqs", 8}, {"n_tokens", 8}, {"n_padding_tokens", 0},
                                 {"n_sampled", 8}, {"sum_context", 800}, {"max_context", 180}, {"prefill_pairs", 0.0},
                                 {"decode_context", 800.0}, {"step_s", 0.95 * grid_s}});
  const TempFile with_points(points.dump());
  EXPECT_NEAR(SimCostModel::from_profile_json(with_points.path(), f.model).step_seconds(f.model, spread_decode()), grid_s,
              1e-9 * grid_s);
  // The same steps served (a calibration run's): the bucket's a_spread goes below 0 to meet them,
  // once the bucket holds kMinServedSpreadSamples of them; fewer leave the grid's price.
  auto calibrated_with = [&](int n) {
    std::vector<RecordedStep> run;
    for (int i = 0; i < n; ++i) {
      RecordedStep r;
      r.run = "served@1";
      r.timing.shape = spread_decode();
      r.timing.measured_s = 0.95 * grid_s;
      r.timing.start_s = 0.01 * i;
      run.push_back(r);
    }
    CalibrationOptions o;
    o.skip_s = 0.0;
    nlohmann::ordered_json served = f.profile;
    add_calibration_samples(served, run, grid, f.model, o);
    const TempFile calibrated(served.dump());
    return SimCostModel::from_profile_json(calibrated.path(), f.model);
  };
  const SimCostModel few = calibrated_with(kMinServedSpreadSamples - 1);
  EXPECT_NEAR(few.step_seconds(f.model, spread_decode()), grid_s, 1e-3 * grid_s) << "too few served to move the bucket";
  const SimCostModel after = calibrated_with(kMinServedSpreadSamples);
  EXPECT_NEAR(after.step_seconds(f.model, spread_decode()), 0.95 * grid_s, 1e-3 * grid_s);
  EXPECT_LT(after.profiled->s_per_decode_spread(8), 0.0);
  // Equal contexts keep the grid's price.
  EXPECT_NEAR(after.step_seconds(f.model, test_shapes::decode_shape(8, 100)),
              grid.step_seconds(f.model, test_shapes::decode_shape(8, 100)), 1e-9);
}

TEST(StepCalibration, PhasesAndErrors) {
  EXPECT_STREQ(calibration_phase(test_shapes::decode_shape(4, 100)), "decode");
  EXPECT_STREQ(calibration_phase(test_shapes::prefill_shape(64, 0)), "prefill");
  EXPECT_STREQ(calibration_phase(test_shapes::prefill_shape(64, 128)), "chunk");
  EXPECT_STREQ(calibration_phase(mixed_shape(60, 0, 4, 100)), "mixed");
  Fixture f;
  CalibrationOptions o;
  o.skip_s = 1e9;  // everything within the warm-up
  EXPECT_THROW(add_calibration_samples(f.profile, serving_run("x@1"), f.cost, f.model, o), std::invalid_argument);
  nlohmann::ordered_json empty = nlohmann::ordered_json::object();
  o.skip_s = 0.0;
  EXPECT_THROW(add_calibration_samples(empty, serving_run("x@1"), f.cost, f.model, o), std::invalid_argument);
}

// The engine's host time a step from a real run's back-to-back steps: steps after which requests
// waited, each host = next start - start - forward; a line through the medians by batch size. Steps
// with nobody waiting (the engine idle until the next arrival), the run's first seconds and the
// last step of each run are left out; too few steps give nothing.
TEST(StepCalibration, HostOverheadFromTheRunsBackToBackSteps) {
  std::vector<RecordedStep> steps;
  double t = 0.0;
  for (int i = 0; i < 400; ++i) {
    RecordedStep r;
    r.run = "continuous@8";
    const int seqs = 8 << (i % 4);  // 8, 16, 32, 64 sequences
    r.timing.shape.n_seqs = r.timing.shape.n_tokens = seqs;
    r.timing.measured_s = 0.005;
    r.record_start_s = t;
    r.n_waiting = i % 5 == 4 ? 0 : 3;  // every fifth step: nobody waits, the engine idles 2 ms after it
    const double host = 20e-6 + 0.5e-6 * seqs + (i % 3 == 0 ? 1e-6 : 0.0);  // a little noise
    t += 0.005 + host + (r.n_waiting == 0 ? 0.002 : 0.0);
    steps.push_back(r);
  }
  const std::optional<HostFromRun> h = host_overhead_from_run(steps, 0.1);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->points.size(), 4u);
  EXPECT_NEAR(h->fitted.per_step_s, 20e-6, 1.5e-6);
  EXPECT_NEAR(h->fitted.per_seq_s, 0.5e-6, 0.05e-6);
  EXPECT_LT(h->steps, 400 * 4 / 5);  // the idle steps and the first 0.1 s left out
  // validate-sim's steps_real.jsonl carries no record start: nothing to fit.
  for (RecordedStep& r : steps) r.record_start_s = -1.0;
  EXPECT_FALSE(host_overhead_from_run(steps, 0.1).has_value());
}

}  // namespace step_calibration_test
}  // namespace servelab
