// The three batching policies on the sim backend and a virtual clock: who runs with whom, when.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "engine/sched/continuous_scheduler.h"
#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace {

using namespace enginetest;

constexpr int64_t kArena = 1 << 20;  // 4096 slots of the micro model's bf16 K/V

TEST(StaticBatching, PadsPromptsAndKeepsFinishedRows) {
  Engine engine(paged_config(static_sched(4, 50.0), kArena), sim_backend());
  const int prompts[4] = {10, 20, 30, 40}, outputs[4] = {5, 10, 3, 8};
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(make_request(i, prompts[i], outputs[i]));
  RunResult r = run_virtual(engine, at_zero(reqs));

  ASSERT_EQ(r.finished.size(), 4u);
  ASSERT_EQ(r.steps.size(), 10u);  // one prefill, then decodes until the longest (10 tokens) is done
  EXPECT_EQ(r.steps[0].batch_size, 4);
  EXPECT_EQ(r.steps[0].n_tokens, 100);
  EXPECT_EQ(r.steps[0].n_padding_tokens, 30 + 20 + 10);
  for (size_t i = 1; i < r.steps.size(); ++i) {
    EXPECT_EQ(r.steps[i].batch_size + r.steps[i].n_padding_tokens, 4) << "step " << i;
    EXPECT_EQ(r.steps[i].n_tokens, r.steps[i].batch_size);
  }
  EXPECT_EQ(r.steps.back().n_padding_tokens, 3);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.at(i).n_output, outputs[i]);
}

TEST(StaticBatching, NewcomerWaitsForTheNextBatch) {
  Engine engine(paged_config(static_sched(4, 50.0), kArena), sim_backend());
  std::vector<Timed> items;
  for (int i = 0; i < 4; ++i) items.push_back({0.0, make_request(i, 16 + 4 * i, 12)});
  items.push_back({1e-4, make_request(4, 8, 4)});  // comes while the first batch runs
  RunResult r = run_virtual(engine, items);

  ASSERT_EQ(r.finished.size(), 5u);
  double batch_end = 0.0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(r.at(i).scheduled_s, 0.0);
    batch_end = std::max(batch_end, r.at(i).end_s);
  }
  const FinishedRequest& late = r.at(4);
  EXPECT_GE(late.scheduled_s, batch_end);
  // Alone in the queue, it waits max_wait_ms for company before its batch of one starts.
  EXPECT_NEAR(late.scheduled_s, late.arrival_s + 0.050, 1e-12);
  EXPECT_LT(batch_end, late.arrival_s + 0.050);
}

TEST(StaticBatching, FullQueueStartsWithoutWaiting) {
  Engine engine(paged_config(static_sched(3, 1000.0), kArena), sim_backend());
  std::vector<Timed> items;
  for (int i = 0; i < 3; ++i) items.push_back({0.5, make_request(i, 8, 2)});
  RunResult r = run_virtual(engine, items);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(r.at(i).scheduled_s, 0.5);
}

TEST(DynamicBatching, BatchSizeFollowsTheQueue) {
  Engine engine(paged_config(dynamic_sched(8, 5.0), kArena), sim_backend());
  std::vector<Timed> items;
  for (int i = 0; i < 2; ++i) items.push_back({0.0, make_request(i, 12, 4)});  // few queued
  for (int i = 2; i < 22; ++i) items.push_back({1.0, make_request(i, 12 + i, 4)});  // a burst of 20
  RunResult r = run_virtual(engine, items);
  ASSERT_EQ(r.finished.size(), 22u);

  std::map<double, int> batch_sizes;  // batch start -> requests in it
  for (const auto& [id, f] : r.finished) ++batch_sizes[f.scheduled_s];
  std::vector<int> sizes;
  for (const auto& [t, n] : batch_sizes) sizes.push_back(n);
  EXPECT_EQ(sizes, (std::vector<int>{2, 8, 8, 4}));
  // The pair waited max_queue_delay_ms for more; the burst filled a batch at once.
  EXPECT_NEAR(batch_sizes.begin()->first, 0.005, 1e-12);
  EXPECT_DOUBLE_EQ(std::next(batch_sizes.begin())->first, 1.0);
  for (const auto& s : r.steps) {
    EXPECT_LE(s.batch_size, 8);
    EXPECT_EQ(s.n_padding_tokens, 0);
  }
}

TEST(DynamicBatching, FinishedMembersLeaveButNobodyJoins) {
  Engine engine(paged_config(dynamic_sched(4, 0.0), kArena), sim_backend());
  std::vector<Timed> items = {{0.0, make_request(0, 10, 2)}, {0.0, make_request(1, 10, 6)}};
  items.push_back({1e-4, make_request(2, 10, 3)});
  RunResult r = run_virtual(engine, items);
  ASSERT_EQ(r.finished.size(), 3u);
  EXPECT_GE(r.at(2).scheduled_s, r.at(1).end_s);
  std::vector<int> first_batch;
  for (const auto& s : r.steps)
    if (s.start_s < r.at(1).end_s) first_batch.push_back(s.batch_size);
  EXPECT_EQ(first_batch, (std::vector<int>{2, 2, 1, 1, 1, 1}));
}

TEST(ContinuousBatching, NewcomerStartsBeforeRunningRequestsFinish) {
  Engine engine(paged_config(continuous_sched(16, 512, false), kArena), sim_backend());
  std::vector<Timed> items;
  for (int i = 0; i < 3; ++i) items.push_back({0.0, make_request(i, 32, 100)});
  items.push_back({0.002, make_request(3, 16, 3)});
  RunResult r = run_virtual(engine, items);
  ASSERT_EQ(r.finished.size(), 4u);
  const double first_finish = std::min({r.at(0).end_s, r.at(1).end_s, r.at(2).end_s});
  EXPECT_LT(r.at(3).first_token_s, first_finish);
  EXPECT_LT(r.at(3).end_s, first_finish);
  EXPECT_EQ(r.at(3).n_output, 3);
}

TEST(ContinuousBatching, ChunkedPrefillRespectsTheTokenBudgetAndMixesDecodes) {
  Engine engine(paged_config(continuous_sched(4, 32, true), kArena), sim_backend());
  std::vector<Timed> items;
  for (int i = 0; i < 6; ++i) items.push_back({0.001 * i, make_request(i, 100, 20)});
  RunResult r = run_virtual(engine, items);
  ASSERT_EQ(r.finished.size(), 6u);
  bool mixed = false;
  for (const auto& s : r.steps) {
    EXPECT_LE(s.n_tokens, 32);
    EXPECT_LE(s.batch_size, 4);
    EXPECT_LE(s.n_running, 4);
    // a step that sampled some sequences and also ran chunks that did not sample
    if (!s.tokens.empty() && s.batch_size > static_cast<int>(s.tokens.size())) mixed = true;
  }
  EXPECT_TRUE(mixed);
  for (const auto& [id, f] : r.finished) EXPECT_EQ(f.n_output, 20);
}

TEST(ContinuousBatching, MaxNumSeqsCapsTheBatch) {
  Engine engine(paged_config(continuous_sched(3, 512, false), kArena), sim_backend());
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(make_request(i, 10 + i, 5 + i));
  RunResult r = run_virtual(engine, at_zero(reqs));
  ASSERT_EQ(r.finished.size(), 8u);
  int widest = 0;
  for (const auto& s : r.steps) {
    EXPECT_LE(s.batch_size, 3);
    EXPECT_LE(s.n_running, 3);
    widest = std::max(widest, s.batch_size);
  }
  EXPECT_EQ(widest, 3);
}

TEST(ContinuousBatching, WithoutChunkingAStepIsPrefillOrDecode) {
  Engine engine(paged_config(continuous_sched(8, 64, false), kArena), sim_backend());
  std::vector<Timed> items;
  for (int i = 0; i < 6; ++i) items.push_back({0.0005 * i, make_request(i, 20 + 5 * i, 10)});
  RunResult r = run_virtual(engine, items);
  ASSERT_EQ(r.finished.size(), 6u);
  for (const auto& s : r.steps) {
    EXPECT_LE(s.n_tokens, 64);
    const bool decode = s.n_tokens == s.batch_size;
    const bool prefill = static_cast<int>(s.tokens.size()) == s.batch_size && s.n_tokens > s.batch_size;
    EXPECT_TRUE(decode || prefill) << "step at " << s.start_s << ": " << s.batch_size << " seqs, " << s.n_tokens
                                   << " tokens";
  }
}

// Without chunked prefill a pass after a decode step of every running sequence skips its walk
// for prefills to resume; tokens appended with no step (jump-forward) must bring it back.
TEST(ContinuousBatching, TokensAppendedWithoutAStepAreCaughtUpAfterADecodeStep) {
  KvConfig kc;
  kc.block_size = 4;
  auto kv = make_kv_manager(kc, 256);
  ContinuousScheduler sched(continuous_sched(8, 64, false), *kv);
  std::vector<Sequence> seqs(2);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].id = i + 1;
    seqs[i].request_id = i + 1;
    seqs[i].tokens = prompt_tokens(10, i + 3);
    seqs[i].n_prompt = 10;
    seqs[i].sampling.max_tokens = 20;
    sched.add(&seqs[i]);
  }
  // What the engine does with a step: its chunks computed, a token drawn where a chunk ends.
  auto run = [](const ScheduledStep& step) {
    for (const ScheduledChunk& c : step.chunks) {
      c.seq->n_computed += c.n_new;
      if (c.seq->n_computed == c.seq->n_with_spec()) c.seq->tokens.push_back(7);
    }
  };
  const ScheduledStep prefill = sched.schedule(0.0);
  ASSERT_EQ(prefill.chunks.size(), 2u);
  run(prefill);
  for (int i = 0; i < 2; ++i) {  // decode steps of both
    const ScheduledStep decode = sched.schedule(0.0);
    ASSERT_EQ(decode.chunks.size(), 2u);
    EXPECT_EQ(decode.chunks[0].n_new + decode.chunks[1].n_new, 2);
    run(decode);
  }
  Sequence& b = seqs[1];
  b.tokens.insert(b.tokens.end(), {8, 9, 10});  // forced tokens, no step computed them
  sched.on_tokens_appended(b);
  const ScheduledStep catch_up = sched.schedule(0.0);  // a prefill-only step: b's four rows
  ASSERT_EQ(catch_up.chunks.size(), 1u);
  EXPECT_EQ(catch_up.chunks[0].seq, &b);
  EXPECT_EQ(catch_up.chunks[0].n_new, 4);
  run(catch_up);
  EXPECT_EQ(sched.schedule(0.0).chunks.size(), 2u);  // both draw again
}

TEST(ContinuousBatching, LongPromptNeedsChunkedPrefill) {
  Engine engine(paged_config(continuous_sched(8, 64, false), kArena), sim_backend());
  auto rejected = engine.add(make_request(0, 65, 4), 0.0);
  ASSERT_TRUE(rejected.has_value());
  EXPECT_EQ(rejected->reason, FinishReason::rejected);
  EXPECT_NE(rejected->error.find("max_num_batched_tokens"), std::string::npos) << rejected->error;
  EXPECT_NE(rejected->error.find("chunked_prefill"), std::string::npos) << rejected->error;

  Engine chunked(paged_config(continuous_sched(8, 64, true), kArena), sim_backend());
  RunResult r = run_virtual(chunked, at_zero({make_request(0, 200, 4)}));
  ASSERT_EQ(r.finished.size(), 1u);
  EXPECT_EQ(r.at(0).reason, FinishReason::length);
  EXPECT_EQ(r.steps.size(), 4u + 3u);  // 200 tokens in chunks of 64, then 3 decodes
}

}  // namespace
}  // namespace servelab
