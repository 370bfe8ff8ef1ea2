// Step error by class: the breakdown validate-sim prints under its figures.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loadgen/step_error.h"

namespace servelab {
namespace {

StepTiming decode_step(int64_t seqs, double measured, double predicted) {
  StepTiming t;
  t.shape.n_tokens = t.shape.n_seqs = t.shape.n_sampled = seqs;
  t.shape.sum_context = 100 * seqs;
  t.shape.decode_context = double(t.shape.sum_context);
  t.measured_s = measured;
  t.predicted_s = predicted;
  return t;
}

/// One chunk of tokens - seqs + 1 rows beside seqs - 1 decodes (seqs 1: a prefill step alone).
StepTiming mixed_step(int64_t tokens, int64_t seqs, double measured, double predicted) {
  StepTiming t = decode_step(seqs, measured, predicted);
  t.shape.n_tokens = tokens;
  t.shape.prefill_pairs = 0.5 * double(tokens - seqs + 1) * double(tokens - seqs + 1);
  t.shape.decode_context = 100.0 * double(seqs - 1);
  return t;
}

TEST(StepError, ClassesDecodeByBatchAndPrefillByTokens) {
  EXPECT_TRUE(is_decode_only(decode_step(8, 1, 1).shape));
  EXPECT_FALSE(is_decode_only(mixed_step(300, 8, 1, 1).shape));
  EXPECT_EQ(step_class(decode_step(1, 1, 1).shape), "decode, 1-4 seqs");
  EXPECT_EQ(step_class(decode_step(4, 1, 1).shape), "decode, 1-4 seqs");
  EXPECT_EQ(step_class(decode_step(5, 1, 1).shape), "decode, 5-16 seqs");
  EXPECT_EQ(step_class(decode_step(300, 1, 1).shape), "decode, 257+ seqs");
  EXPECT_EQ(step_class(mixed_step(256, 1, 1, 1).shape), "prefill, 1-256 tokens");
  EXPECT_EQ(step_class(mixed_step(257, 1, 1, 1).shape), "prefill, 257-1024 tokens");
  EXPECT_EQ(step_class(mixed_step(5000, 1, 1, 1).shape), "prefill, 4097+ tokens");
  EXPECT_EQ(step_class(mixed_step(512, 12, 1, 1).shape), "mixed, 257-1024 tokens");  // a chunk beside 11 decodes
  EXPECT_EQ(step_class(mixed_step(40, 3, 1, 1).shape), "mixed, 1-256 tokens");
}

TEST(StepError, SumsEachClassAndTakesItsMedianRatio) {
  const std::vector<StepTiming> steps = {decode_step(2, 1.0, 1.0),  decode_step(3, 2.0, 1.0),
                                         decode_step(1, 3.0, 2.0),  decode_step(32, 1.0, 1.1),
                                         mixed_step(600, 4, 4.0, 3.0), mixed_step(600, 1, 2.0, 2.2)};
  const std::vector<StepClassError> c = step_class_errors(steps);
  ASSERT_EQ(c.size(), 4u);  // empty classes left out, decode first, then prefill, then mixed
  EXPECT_EQ(c[0].name, "decode, 1-4 seqs");
  EXPECT_EQ(c[0].n_steps, 3);
  EXPECT_DOUBLE_EQ(c[0].measured_s, 6.0);
  EXPECT_DOUBLE_EQ(c[0].predicted_s, 4.0);
  EXPECT_DOUBLE_EQ(c[0].error(), -1.0 / 3.0);
  EXPECT_DOUBLE_EQ(c[0].ratio_p50, 1.5);  // ratios 1, 2, 1.5
  EXPECT_EQ(c[1].name, "decode, 17-64 seqs");
  EXPECT_NEAR(c[1].error(), 0.1, 1e-12);
  EXPECT_EQ(c[2].name, "prefill, 257-1024 tokens");
  EXPECT_NEAR(c[2].error(), 0.1, 1e-12);
  EXPECT_EQ(c[3].name, "mixed, 257-1024 tokens");
  EXPECT_DOUBLE_EQ(c[3].error(), -0.25);
  EXPECT_TRUE(step_class_errors({}).empty());
}

TEST(StepError, WritesOneJsonLinePerStep) {
  const std::string line = step_timing_line("paged@2", mixed_step(600, 4, 0.02, 0.018));
  ASSERT_EQ(line.back(), '\n');
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j.at("run"), "paged@2");
  EXPECT_EQ(j.at("n_tokens"), 600);
  EXPECT_EQ(j.at("n_seqs"), 4);
  EXPECT_DOUBLE_EQ(j.at("measured_s").get<double>(), 0.02);
  EXPECT_DOUBLE_EQ(j.at("predicted_s").get<double>(), 0.018);
}

}  // namespace
}  // namespace servelab
