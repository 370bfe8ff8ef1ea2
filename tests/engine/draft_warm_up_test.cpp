// A model proposer's warm-up (the draft backend's first use of each step shape paid before
// serving: engine/spec/draft_warm_up.h) and its catch-up in steps of the draft's row limit, on the
// cpu backend behind a wrapper that reports the shapes a cuda backend would and records every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/forwarding_backend.h"
#include "engine/model/weights.h"
#include "engine/spec/draft_warm_up.h"
#include "engine/spec/model_proposer.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace draft_warm_up_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

/// What the cuda backend reports for 6 sequences, 96 rows and 300-token contexts (graph buckets
/// 1, 2, 4 and 6 padded to 8; context buckets 256 and 300 in the 512 one; cuBLASLt row buckets).
WarmShapes cuda_like_shapes() {
  WarmShapes w;
  w.decode_batches = {1, 2, 4, 6};
  w.decode_contexts = {256, 300};
  for (int r = 2; r <= 64; ++r) w.step_rows.push_back(r);
  w.step_rows.push_back(96);
  return w;
}

StepLimits limits_6_96_300() {
  StepLimits l;
  l.max_seqs = 6;
  l.max_rows = 96;
  l.max_context = 300;
  l.block_size = 16;
  return l;
}

/// One step the draft backend ran.
struct SeenStep {
  int seqs = 0, rows = 0, draws = 0, max_context = 0;
  bool decode_only = false, probs = false;
};

/// The cpu backend reporting `shapes` as its warm shapes and recording each step.
class ShapedCpu final : public ForwardingBackend {
 public:
  ShapedCpu(std::unique_ptr<Backend> inner, WarmShapes shapes, std::vector<SeenStep>& seen)
      : ForwardingBackend(std::move(inner)), shapes_(std::move(shapes)), seen_(seen) {}
  WarmShapes warm_shapes(const StepLimits& limits) const override {
    (void)limits;
    return shapes_;
  }
  StepOutput execute(const Step& step) override {
    seen_.push_back(SeenStep{step.in.n_seqs(), step.n_rows(), step.in.n_samples(), step.in.max_context(),
                             step.in.decode_only, step.want_draw_probs});
    return inner().execute(step);
  }

 private:
  WarmShapes shapes_;
  std::vector<SeenStep>& seen_;
};

std::unique_ptr<ModelProposer> proposer(std::vector<SeenStep>& seen, WarmShapes shapes, int max_rows) {
  ModelConfig model = micro_model();
  model.max_position = 512;  // contexts of up to 300
  auto w = std::make_shared<const ModelWeights>(ModelWeights::random(model, 21));
  CpuBackendOptions o;
  o.n_threads = 1;
  ModelProposerOptions po;
  po.kv_cache_bytes = 4 << 20;
  po.max_model_len = 300;
  po.max_num_seqs = 6;
  po.max_num_batched_tokens = max_rows;
  auto backend = std::make_unique<ShapedCpu>(std::make_unique<CpuBackend>(w, o), std::move(shapes), seen);
  return std::make_unique<ModelProposer>("self", std::move(backend), model.vocab_size, po);
}

TEST(DraftWarmUp, ThePlanRunsEveryShapeWithinTheLimits) {
  const WarmShapes shapes = cuda_like_shapes();
  const StepLimits l = limits_6_96_300();
  const std::vector<DraftWarmRound> plan = draft_warm_up_plan(shapes, l);
  std::set<int> rows_run, draws_run;  // k = 1 rounds: their rows, and the draws of those of 2-token sequences
  std::map<std::pair<int, int>, int> graph_rounds;  // (batch, last one-row context) -> rounds, greedy and sampled
  bool greedy_seen = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    const DraftWarmRound& r = plan[i];
    int rows = 0;
    for (int n : r.lengths) {
      EXPECT_GE(n, 2) << "round " << i << ": a one-row sequence would make its step a decode step";
      EXPECT_LE(n + r.k, l.max_context) << "round " << i;
      rows += n;
    }
    EXPECT_LE(int(r.lengths.size()), l.max_seqs) << "round " << i;
    if (r.k == 1) {
      EXPECT_LE(rows, l.max_rows) << "round " << i;
      EXPECT_FALSE(r.sampled);
      rows_run.insert(rows);
      if (std::all_of(r.lengths.begin(), r.lengths.end(), [](int n) { return n == 2; }))
        draws_run.insert(int(r.lengths.size()));
      continue;
    }
    EXPECT_EQ(r.k, 3) << "two one-row steps: the eager first run and the capture";
    greedy_seen = greedy_seen || !r.sampled;
    EXPECT_FALSE(r.sampled && greedy_seen) << "round " << i << ": sampled rounds come first";
    ++graph_rounds[{int(r.lengths.size()), r.lengths[0] + r.k - 1}];
  }
  // Every row bucket as one eager step, every draw count 1..6 as a catch-up of that many sequences.
  for (int rows : shapes.step_rows) EXPECT_TRUE(rows_run.count(rows)) << rows << " rows";
  EXPECT_EQ(draws_run, (std::set<int>{1, 2, 3, 4, 5, 6}));
  // Every (batch, context bucket): greedy and sampled, the last one-row step at the bucket's
  // context (299: a sequence drafting 1 holds at most max_context - 1 tokens).
  std::map<std::pair<int, int>, int> want;
  for (int b : shapes.decode_batches)
    for (int c : {256, 299}) want[{b, c}] = 2;
  EXPECT_EQ(graph_rounds, want);
  // The first graph round: the largest batch, sampled (the buffers it grows, before any capture).
  const auto first = std::find_if(plan.begin(), plan.end(), [](const DraftWarmRound& r) { return r.k == 3; });
  ASSERT_NE(first, plan.end());
  EXPECT_EQ(first->lengths.size(), 6u);
  EXPECT_TRUE(first->sampled);
  EXPECT_TRUE(draft_warm_up_plan(WarmShapes{}, l).empty()) << "nothing to warm: no rounds";
}

TEST(DraftWarmUp, RunsThePlanOnTheDraftAndLeavesItAsItWas) {
  std::vector<SeenStep> seen;
  auto p = proposer(seen, cuda_like_shapes(), 96);
  const int64_t free_before = p->kv().free_slots();
  const DraftWarmUpStats st = p->warm_up();
  EXPECT_EQ(st.rounds, int(draft_warm_up_plan(cuda_like_shapes(), p->limits()).size()));
  EXPECT_EQ(st.steps, int(seen.size()));
  EXPECT_EQ(p->n_sequences(), 0) << "its sequences forgotten";
  EXPECT_EQ(p->kv().free_slots(), free_before) << "their K/V given back";
  // Two one-row steps of each batch at each context bucket, greedy and sampled (the sampled ones
  // with q where the backend writes it: cuda; not the cpu backend).
  std::map<std::pair<int, int>, int> one_row;
  std::set<int> eager_rows;
  int with_q = 0;
  for (const SeenStep& s : seen) {
    EXPECT_LE(s.rows, 96);
    with_q += s.probs;
    if (s.decode_only) ++one_row[{s.seqs, s.max_context <= 256 ? 256 : 512}];
    else eager_rows.insert(s.rows);
  }
  EXPECT_EQ(with_q > 0, p->backend().caps().draw_probs);
  for (int b : {1, 2, 4, 6})
    for (int c : {256, 512}) EXPECT_EQ((one_row[{b, c}]), 4) << b << " seqs, context " << c;
  for (int rows = 2; rows <= 64; ++rows) EXPECT_TRUE(eager_rows.count(rows)) << rows << " rows";
  EXPECT_TRUE(eager_rows.count(96));

  // Drafts after the warm-up are those of a proposer that never warmed up.
  std::vector<SeenStep> seen_cold;
  auto cold = proposer(seen_cold, cuda_like_shapes(), 96);
  std::vector<Sequence> seqs(3);
  std::vector<std::vector<TokenId>> warm_drafts(3), cold_drafts(3);
  std::vector<DraftTask> warm_tasks, cold_tasks;
  for (int i = 0; i < 3; ++i) {
    seqs[size_t(i)].id = uint64_t(i);
    seqs[size_t(i)].status = SeqStatus::running;
    for (int t = 0; t < 20 + 7 * i; ++t) seqs[size_t(i)].tokens.push_back(TokenId((31 * t + 5 * i) % 256));
    seqs[size_t(i)].n_prompt = seqs[size_t(i)].n_tokens();
    warm_tasks.push_back(DraftTask{&seqs[size_t(i)], 3, &warm_drafts[size_t(i)], nullptr});
    cold_tasks.push_back(DraftTask{&seqs[size_t(i)], 3, &cold_drafts[size_t(i)], nullptr});
  }
  p->propose_batch(warm_tasks);
  cold->propose_batch(cold_tasks);
  EXPECT_EQ(warm_drafts, cold_drafts);
  EXPECT_EQ(warm_drafts[0].size(), 3u);
}

TEST(DraftWarmUp, ALongCatchUpRunsInStepsOfTheDraftsRowLimit) {
  // Three prompts of 40-60 tokens: 150 rows to catch up at a row limit of 16 run as 9 steps of
  // 16 rows and less, none drawing, then the drafting step; the drafts are those of one
  // catch-up step, and the catch-up beyond steady drafting is reported.
  std::vector<SeenStep> seen_small, seen_big;
  auto small = proposer(seen_small, WarmShapes{}, 16);
  auto big = proposer(seen_big, WarmShapes{}, 2048);
  std::vector<Sequence> seqs(3);
  std::vector<std::vector<TokenId>> d_small(3), d_big(3);
  std::vector<DraftTask> t_small, t_big;
  for (int i = 0; i < 3; ++i) {
    Sequence& s = seqs[size_t(i)];
    s.id = uint64_t(10 + i);
    s.status = SeqStatus::running;
    for (int t = 0; t < 40 + 10 * i; ++t) s.tokens.push_back(TokenId((17 * t + 3 * i + 2) % 256));
    s.n_prompt = s.n_tokens();
    t_small.push_back(DraftTask{&s, 2, &d_small[size_t(i)], nullptr});
    t_big.push_back(DraftTask{&s, 2, &d_big[size_t(i)], nullptr});
  }
  small->propose_batch(t_small);
  big->propose_batch(t_big);
  EXPECT_EQ(d_small, d_big);
  ASSERT_EQ(seen_big.size(), 2u) << "one catch-up step and one one-row step";
  EXPECT_EQ(seen_big[0].rows, 150);
  int chunk_rows = 0;
  for (size_t i = 0; i + 2 < seen_small.size(); ++i) {
    EXPECT_LE(seen_small[i].rows, 16);
    EXPECT_EQ(seen_small[i].draws, 0) << "step " << i << ": a chunk draws nothing";
    chunk_rows += seen_small[i].rows;
  }
  ASSERT_GE(seen_small.size(), 3u);
  const SeenStep& first_draw = seen_small[seen_small.size() - 2];
  EXPECT_LE(first_draw.rows, 16);
  EXPECT_EQ(first_draw.draws, 3);
  EXPECT_EQ(chunk_rows + first_draw.rows, 150);
  EXPECT_GE(int(seen_small.size()), 2 + (150 - 16) / 16);
  EXPECT_GT(small->catch_up_excess_s(), 0.0);
  // The next round catches up the 1-2 rows a sequence a steady round has: one step, no chunks.
  for (int i = 0; i < 3; ++i) seqs[size_t(i)].tokens.push_back(d_small[size_t(i)][0]), d_small[size_t(i)].clear();
  const size_t before = seen_small.size();
  small->propose_batch(t_small);
  EXPECT_EQ(seen_small.size() - before, 2u);
  EXPECT_EQ(small->catch_up_excess_s(), 0.0);
}

}  // namespace draft_warm_up_test
}  // namespace servelab
