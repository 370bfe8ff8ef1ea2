// ProfiledStepModel's fit where the profile cannot tell its terms apart: a long-prompt grid whose
// only eager steps are full-size chunks (below the chunk only decodes measured M), its eager row
// function with graph buckets and the fixed cost of a mixed step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "engine/backend/cost_model.h"
#include "tests/engine/step_shapes.h"

namespace servelab {
namespace {

using test_shapes::decode_shape;
using test_shapes::prefill_shape;

/// What `servelab profile --for-scenario` measures for prompts of 1-4k tokens in 512-token chunks
/// on a backend that replays decodes as CUDA graphs (the llama3-8b long-prompt matrix cell): graphed
/// decodes of 1-256 sequences, 512-row chunks at four contexts, whole prompts of 1-4k rows and one
/// mixed step (a chunk beside 11 decodes). Nothing eager below 512 rows. Times from one eager row
/// function, an LM head cost per sampled row and the attention terms, plus a fixed cost for a
/// mixed step (its decodes run eagerly beside the chunk); decodes from their graphs.
struct LongPromptGrid {
  std::vector<int> buckets = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256};
  static double eager(double rows) { return 4.8e-3 + 1.4e-5 * rows; }
  static double graph(double rows) { return 4.5e-3 + 2.5e-5 * rows; }
  static constexpr double kSampled = 5e-6, kPair = 7e-10, kContext = 3e-8, kMixed = 2.5e-3;
  static double eager_time(const StepShape& s) {
    return eager(double(s.n_rows())) + kSampled * double(s.n_sampled) + kPair * s.prefill_pairs +
           kContext * s.decode_context + (s.prefill_pairs > 0 && s.decode_context > 0 ? kMixed : 0.0);
  }
  /// A `tokens`-row chunk at `context` beside `decodes` decodes at `context` + 1.
  static StepShape mixed_of(int tokens, int decodes, int context) {
    StepShape s = prefill_shape(tokens, context);
    const StepShape d = decode_shape(decodes, context + 1);
    s.n_tokens += d.n_tokens;
    s.n_sampled += d.n_sampled;
    s.n_seqs += d.n_seqs;
    s.sum_context += d.sum_context;
    s.decode_context = d.decode_context;
    s.attention_pairs += d.attention_pairs;
    return s;
  }
  std::vector<TimedStep> samples() const {
    std::vector<TimedStep> steps;
    for (int b : {1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256})
      for (int c : {1226, 2517, 3774}) {
        const StepShape s = decode_shape(b, c);
        const int bucket = *std::lower_bound(buckets.begin(), buckets.end(), b);
        steps.push_back({s, graph(bucket) + kContext * s.decode_context});
      }
    for (int c : {1225, 2516, 3773, 4090}) steps.push_back({prefill_shape(512, c), 0});
    for (int t : {1024, 1763, 2452, 3840}) steps.push_back({prefill_shape(t, 0), 0});
    steps.push_back({mixed_of(512, 11, 3773), 0});
    for (TimedStep& t : steps)
      if (t.step_s == 0) t.step_s = eager_time(t.shape);
    return steps;
  }
};

TEST(ProfiledStepModelFit, ShortChunksBelowTheOnlyMeasuredChunkArePricedBetweenItsNeighbours) {
  const LongPromptGrid grid;
  const std::vector<TimedStep> steps = grid.samples();
  for (const bool graphed : {true, false}) {
    const ProfiledStepModel m = graphed ? ProfiledStepModel::fit(steps, grid.buckets) : ProfiledStepModel::fit(steps);
    SCOPED_TRACE(graphed ? "with graph buckets" : "without");
    // The samples still come back as measured.
    for (const TimedStep& t : steps)
      EXPECT_NEAR(m.predict_clamped(t.shape), t.step_s, 1e-6 * t.step_s) << t.shape.n_rows() << " rows";
    // Nothing in the grid samples more than one row on a knot an eager step also sits on: the
    // sampled term cannot be told from M, so M carries it and stays positive on every knot.
    EXPECT_EQ(m.s_per_sampled(), 0.0);
    for (size_t i = 0; i < m.knots().size(); ++i) EXPECT_GT(m.knot_seconds()[i], 0.0) << m.knots()[i] << " rows";
    // A prompt's last chunk (1-511 rows): more than a 1-row decode costs, less than the measured
    // 512-row chunk at its context, and dearer the more rows it has.
    for (int c : {1225, 3773}) {
      const double full = m.predict_clamped(prefill_shape(512, c)), one = LongPromptGrid::graph(1);
      double before = 0.0;
      for (int t : {1, 17, 64, 100, 256, 300, 511}) {
        const double priced = m.predict_clamped(prefill_shape(t, c));
        EXPECT_GT(priced, one) << t << " rows at " << c;
        EXPECT_LT(priced, full) << t << " rows at " << c;
        EXPECT_GT(priced, before) << t << " rows at " << c;
        before = priced;
      }
    }
  }
}

TEST(ProfiledStepModelFit, WithGraphBucketsEagerStepsArePricedByTheEagerRowsAndMixedStepsPayTheirOwnCost) {
  const LongPromptGrid grid;
  const ProfiledStepModel m = ProfiledStepModel::fit(grid.samples(), grid.buckets);
  // M over the eager knots is the eager row function; below them the decodes' knots stay.
  for (size_t i = 0; i < m.knots().size(); ++i) {
    const double rows = m.knots()[i];  // the chunks' one sampled row rides on M (the term is pinned)
    if (rows >= 512) {
      EXPECT_NEAR(m.knot_seconds()[i], LongPromptGrid::eager(rows) + LongPromptGrid::kSampled, 1e-9) << rows;
    }
  }
  EXPECT_EQ(std::count(m.knots().begin(), m.knots().end(), 523.0), 0);  // the mixed sample sets no knot
  EXPECT_EQ(m.knots().front(), 1.0);
  EXPECT_EQ(m.knots().back(), 3840.0);
  // Its one mixed sample sets c_mixed (with the 11 sampled decode rows the sampled term left to it).
  EXPECT_NEAR(m.mixed_step_seconds(), LongPromptGrid::kMixed + 11 * LongPromptGrid::kSampled, 1e-9);
  // Mixed steps the profile did not measure: a chunk beside 2-60 decodes, a last chunk beside 30.
  for (const auto& [tokens, decodes] : std::vector<std::pair<int, int>>{{512, 2}, {512, 60}, {300, 30}, {40, 30}}) {
    const StepShape s = LongPromptGrid::mixed_of(tokens, decodes, 2000);
    const double want = LongPromptGrid::eager_time(s), got = m.predict_clamped(s);
    if (tokens + decodes >= 512) {  // within the eager knots: off by the sampled rows c_mixed took for 11
      EXPECT_NEAR(got, want, std::abs(decodes - 11) * LongPromptGrid::kSampled + 1e-12) << tokens << " + " << decodes;
    } else {  // below them M is the graphed decodes' (another row function): near, not 0 nor double
      EXPECT_NEAR(got, want, 0.2 * want) << tokens << " + " << decodes;
    }
  }
  // Without buckets nothing is refitted and no mixed cost is split off.
  EXPECT_EQ(ProfiledStepModel::fit(grid.samples()).mixed_step_seconds(), 0.0);
}

// Mixed steps whose cost beside their parts grows with their rows (on an H200 a llama3-8b chunk of
// 125 / 512 rows beside 11 decodes cost 0.5 / 4.5 ms over the chunk alone): with mixed samples
// of several row counts the fit finds c_mixed + b_mixed · rows, and prices a 512-row mixed step
// the profile did not measure (30 decodes) as the grid would.
TEST(ProfiledStepModelFit, MixedStepsOfSeveralRowCountsSetTheMixedRowTerm) {
  const LongPromptGrid grid;
  constexpr double kMixedRow = 6e-6;  // seconds a row of a mixed step
  auto time = [&](const StepShape& s) {
    const bool mixed = s.prefill_pairs > 0 && s.decode_context > 0;
    return LongPromptGrid::eager_time(s) + (mixed ? kMixedRow * double(s.n_rows()) : 0.0);
  };
  std::vector<TimedStep> steps = grid.samples();
  steps.erase(std::remove_if(steps.begin(), steps.end(),
                             [](const TimedStep& t) { return t.shape.prefill_pairs > 0 && t.shape.decode_context > 0; }),
              steps.end());
  for (int chunk : {125, 241, 359, 512}) {  // the chunk quartiles alone and beside 11 decodes
    for (int c : {1225, 3773}) steps.push_back({prefill_shape(chunk, c), 0});
    steps.push_back({LongPromptGrid::mixed_of(chunk, 11, 3773), 0});
  }
  for (TimedStep& t : steps)
    if (t.step_s == 0) t.step_s = time(t.shape);
  const ProfiledStepModel m = ProfiledStepModel::fit(steps, grid.buckets);
  EXPECT_NEAR(m.mixed_row_seconds(), kMixedRow, 1e-9);
  EXPECT_NEAR(m.mixed_step_seconds(), LongPromptGrid::kMixed + 11 * LongPromptGrid::kSampled, 1e-7);
  for (const TimedStep& t : steps) EXPECT_NEAR(m.predict_clamped(t.shape), t.step_s, 1e-6 * t.step_s);
  const StepShape serving = LongPromptGrid::mixed_of(482, 30, 2000);  // 512 rows
  EXPECT_NEAR(m.predict_clamped(serving), time(serving), 19 * LongPromptGrid::kSampled + 1e-9);
  // One mixed row count (the grid above): no row term, the fixed cost as before.
  EXPECT_EQ(ProfiledStepModel::fit(grid.samples(), grid.buckets).mixed_row_seconds(), 0.0);
}

// An eager step of fewer rows than any eager sample (a prompt's short last chunk beside decodes)
// is priced at least by the eager row function extended down from its first two knots, not by the
// graphed decodes' knots there where those are cheaper (in this grid below 27 rows: the graphs'
// fixed cost is the lower one, their cost a row the higher).
TEST(ProfiledStepModelFit, EagerStepsBelowTheEagerKnotsCostAtLeastTheEagerRowFunction) {
  const LongPromptGrid grid;
  const ProfiledStepModel m = ProfiledStepModel::fit(grid.samples(), grid.buckets);
  for (const auto& [tokens, decodes] : std::vector<std::pair<int, int>>{{40, 30}, {20, 11}, {100, 2}, {6, 2}, {10, 4}}) {
    const StepShape s = LongPromptGrid::mixed_of(tokens, decodes, 2000);
    // c_mixed took the sampled rows of the grid's 11 decodes: within that of the eager function
    const double eager = LongPromptGrid::eager_time(s), slack = std::abs(decodes - 11) * LongPromptGrid::kSampled + 1e-9;
    EXPECT_GE(m.predict_clamped(s), eager - slack) << tokens << " + " << decodes;
    if (tokens + decodes <= 16) EXPECT_NEAR(m.predict_clamped(s), eager, slack) << tokens << " + " << decodes;
  }
}

TEST(ProfiledStepModelFit, AnEagerStepBesideTheDecodesOnAKnotSetsTheSampledTerm) {
  // The same grid with eager chunks of 16 and 64 rows: on those knots decodes (16 and 64 sampled
  // rows) and chunks (one) now tell M and the sampled term apart, and the fit finds the sampled
  // term the samples imply, as before (no buckets: every step from one row function).
  const LongPromptGrid grid;
  std::vector<TimedStep> steps;
  for (int b : {1, 4, 16, 64, 256})
    for (int c : {1226, 3774}) steps.push_back({decode_shape(b, c), 0});
  for (int t : {16, 64, 512})
    for (int c : {0, 1225, 3773}) steps.push_back({prefill_shape(t, c), 0});
  for (TimedStep& t : steps) t.step_s = LongPromptGrid::eager_time(t.shape);
  const ProfiledStepModel m = ProfiledStepModel::fit(steps);
  EXPECT_NEAR(m.s_per_sampled(), LongPromptGrid::kSampled, 1e-9);
  EXPECT_NEAR(m.s_per_prefill_pair(), LongPromptGrid::kPair, 1e-15);
  EXPECT_NEAR(m.s_per_decode_context(), LongPromptGrid::kContext, 1e-13);
  for (size_t i = 0; i < m.knots().size(); ++i)
    EXPECT_NEAR(m.knot_seconds()[i], LongPromptGrid::eager(m.knots()[i]), 1e-9) << m.knots()[i] << " rows";
}

}  // namespace
}  // namespace servelab

namespace servelab {
namespace {

/// A decode of `batch` sequences whose contexts run evenly from c/2 to 3c/2 (mean c).
StepShape spread_decode_shape(int batch, int c) {
  StepShape s = test_shapes::decode_shape(batch, c);
  s.max_context = c / 2 + c;
  return s;
}

TEST(ProfiledStepModelFit, SpreadDecodesSetTheirOwnTermAndLeaveTheRestAsFitted) {
  const std::vector<int> buckets = {1, 2, 4, 8, 16, 32};
  auto graph = [](double rows) { return 0.004 + 2e-5 * rows; };
  const double a_decode = 3e-8;
  auto a_spread = [](int bucket) { return bucket <= 8 ? 2.5e-7 : 1e-7; };  // its own at each bucket
  std::vector<TimedStep> uniform;
  for (int t : {64, 256}) uniform.push_back({test_shapes::prefill_shape(t, 0), 0.005 + 1e-5 * t});
  for (int b : {1, 2, 4, 8, 16, 32})
    for (int c : {500, 2000}) {
      const StepShape s = test_shapes::decode_shape(b, c);
      uniform.push_back({s, graph(b) + a_decode * s.decode_context});
    }
  std::vector<TimedStep> with = uniform;
  for (int b : {2, 4, 8, 16, 32})
    for (int c : {500, 2000}) {
      const StepShape s = spread_decode_shape(b, c);
      with.push_back({s, graph(b) + a_decode * s.decode_context + a_spread(b) * s.decode_spread()});
    }
  const ProfiledStepModel base = ProfiledStepModel::fit(uniform, buckets);
  const ProfiledStepModel m = ProfiledStepModel::fit(with, buckets);
  EXPECT_EQ(base.s_per_decode_spread(12), 0.0);  // no spread points: no term
  EXPECT_TRUE(base.spread_knots().empty());
  EXPECT_EQ(m.spread_knots(), (std::vector<double>{2, 4, 8, 16, 32}));
  for (int b : {2, 3, 8, 12, 32, 64}) EXPECT_NEAR(m.s_per_decode_spread(b), a_spread(b <= 8 ? 8 : 16), 1e-12) << b;
  EXPECT_NEAR(m.s_per_decode_spread(1), a_spread(2), 1e-12);  // below the first knot: its value
  // The other terms are the uniform profile's: the twins take no part in them.
  EXPECT_EQ(m.graph_knot_seconds(), base.graph_knot_seconds());
  EXPECT_EQ(m.s_per_decode_context(), base.s_per_decode_context());
  for (const TimedStep& t : with) EXPECT_NEAR(m.predict_clamped(t.shape), t.step_s, 1e-9 * t.step_s);
  // A mixed batch of 12 (bucket 16) at mean 1000, longest 1700: its spread priced on top.
  StepShape mixed = test_shapes::decode_shape(12, 1000);
  mixed.max_context = 1700;
  EXPECT_NEAR(mixed.decode_spread(), 700.0, 1e-12);
  EXPECT_NEAR(m.predict_clamped(mixed), base.predict_clamped(mixed) + a_spread(16) * 700.0, 1e-12);
  // Prefills and equal contexts have no spread.
  EXPECT_EQ(test_shapes::prefill_shape(64, 100).decode_spread(), 0.0);
  EXPECT_EQ(test_shapes::decode_shape(8, 300).decode_spread(), 0.0);
  // A profile of spread decodes alone cannot be fitted: it needs the rest to price.
  std::vector<TimedStep> only(with.begin() + std::ptrdiff_t(uniform.size()), with.end());
  EXPECT_THROW(ProfiledStepModel::fit(only, buckets), std::invalid_argument);
}

}  // namespace
}  // namespace servelab

namespace servelab {
namespace {

// A noisy profile can fit a row function below 0 where no sample holds it up (here two prefills
// of 32 rows, the short one timed low: a negative M(32) with a steep prefill-pair term). A step
// priced at or below 0 there (a decode of 32 sequences) costs the profile's cheapest step instead:
// every step runs every layer once. Steps the fit prices above 0 keep their price.
TEST(ProfiledStepModelFit, AStepPricedAtOrBelowZeroCostsTheCheapestSample) {
  const std::vector<TimedStep> steps = {{test_shapes::prefill_shape(32, 0), 0.5e-3},
                                        {test_shapes::prefill_shape(32, 2000), 100e-3}};
  const ProfiledStepModel m = ProfiledStepModel::fit(steps);
  for (const TimedStep& t : steps) EXPECT_NEAR(m.predict_clamped(t.shape), t.step_s, 1e-9);
  EXPECT_DOUBLE_EQ(m.predict_clamped(test_shapes::decode_shape(32, 1)), 0.5e-3);
}

}  // namespace
}  // namespace servelab
