// Engine: configuration errors, rejections with their reasons, EOS, parallel samples, prefix
// caching and abort, on the sim backend.
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <stdexcept>
#include <string>

#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace {

using namespace enginetest;

constexpr int64_t kSlotBytes = 256;  // micro model, bf16 K/V: 2 × 2 layers × 32 × 2 bytes

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(EngineConfig, ArenaTooSmallForOneBlockNamesTheField) {
  const std::string e = error_of([] {
    Engine engine(paged_config(continuous_sched(8, 256, false), 15 * kSlotBytes), sim_backend());
  });
  EXPECT_NE(e.find("engine.kv_cache_bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("3840"), std::string::npos) << e;              // what was given
  EXPECT_NE(e.find(std::to_string(16 * kSlotBytes)), std::string::npos) << e;  // what it takes
}

TEST(EngineConfig, NaiveMaxReservationMustFitTheArena) {
  EngineConfig c = paged_config(continuous_sched(8, 256, false), 100 * kSlotBytes);
  c.kv.kind = KvKind::naive;
  c.kv.reserve = NaiveReserve::max;
  c.kv.max_model_len = 128;
  const std::string e = error_of([&] { Engine engine(c, sim_backend()); });
  EXPECT_NE(e.find("engine.kv_cache_bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("max_model_len = 128"), std::string::npos) << e;
  c.kv_cache_bytes = 128 * kSlotBytes;
  EXPECT_NO_THROW(Engine(c, sim_backend()));
}

TEST(EngineConfig, BadFieldsAreNamed) {
  EngineConfig c = paged_config(continuous_sched(0, 256, false), 1 << 20);
  EXPECT_NE(error_of([&] { Engine engine(c, sim_backend()); }).find("max_num_seqs"), std::string::npos);
  c = paged_config(continuous_sched(8, 256, false), 0);
  EXPECT_NE(error_of([&] { Engine engine(c, sim_backend()); }).find("engine.kv_cache_bytes"), std::string::npos);
  c = paged_config(static_sched(8, -1.0), 1 << 20);
  EXPECT_NE(error_of([&] { Engine engine(c, sim_backend()); }).find("max_wait_ms"), std::string::npos);
}

TEST(EngineConfig, TokenBudgetBelowMaxNumSeqsIsRejected) {
  const std::string e = error_of([] { Engine engine(paged_config(continuous_sched(8, 4, true), 1 << 20), sim_backend()); });
  EXPECT_NE(e.find("max_num_batched_tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("max_num_seqs (8)"), std::string::npos) << e;
  EXPECT_NO_THROW(Engine(paged_config(continuous_sched(8, 8, true), 1 << 20), sim_backend()));
}

TEST(EngineConfig, ArenaCheckIsOneFunctionTheConstructorUses) {
  EngineConfig c = paged_config(continuous_sched(8, 256, false), 15 * kSlotBytes);
  const std::string direct = error_of([&] { check_kv_arena(c, micro_model(), kSlotBytes); });
  EXPECT_EQ(direct, error_of([&] { Engine engine(c, sim_backend()); }));
  EXPECT_NE(direct.find("engine.kv_cache_bytes"), std::string::npos);
  c.kv_cache_bytes = 16 * kSlotBytes;
  EXPECT_EQ(check_kv_arena(c, micro_model(), kSlotBytes), 16);
}

TEST(EngineAdd, TooLongRequestIsRejectedWhileOthersFinish) {
  Engine engine(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend());
  std::vector<Request> reqs = {make_request(0, 20, 5), make_request(1, 200, 57), make_request(2, 30, 4)};
  RunResult r = run_virtual(engine, at_zero(reqs));
  ASSERT_EQ(r.finished.size(), 3u);
  EXPECT_EQ(r.at(1).reason, FinishReason::rejected);
  EXPECT_NE(r.at(1).error.find("max model length 256"), std::string::npos) << r.at(1).error;
  EXPECT_EQ(r.at(0).reason, FinishReason::length);
  EXPECT_EQ(r.at(2).reason, FinishReason::length);
  EXPECT_EQ(r.at(2).n_output, 4);
}

TEST(EngineAdd, KvMaxModelLenBelowTheModelsIsTheLimit) {
  EngineConfig c = paged_config(continuous_sched(8, 512, false), 1 << 20);
  c.kv.max_model_len = 64;
  Engine engine(c, sim_backend());
  EXPECT_EQ(engine.config().kv.max_model_len, 64);
  EXPECT_FALSE(engine.add(make_request(0, 60, 4), 0.0).has_value());
  auto r = engine.add(make_request(1, 60, 5), 0.0);
  ASSERT_TRUE(r.has_value());
  EXPECT_NE(r->error.find("max model length 64"), std::string::npos) << r->error;
}

TEST(EngineAdd, MalformedRequestsAreRejectedWithTheirReason) {
  Engine engine(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend());
  Request empty = make_request(0, 1, 4);
  empty.prompt.clear();
  EXPECT_NE(engine.add(empty, 0.0)->error.find("empty prompt"), std::string::npos);
  Request bad_token = make_request(1, 5, 4);
  bad_token.prompt[3] = 256;
  EXPECT_NE(engine.add(bad_token, 0.0)->error.find("index 3"), std::string::npos);
  // Prompts long enough for the vectorised check's body: a negative id, one just past the
  // vocabulary, and the last id in it (accepted).
  for (const auto& [at, id] : {std::pair{37, -1}, std::pair{21, 256}, std::pair{20, std::numeric_limits<int>::min()}}) {
    Request r = make_request(4, 40, 4);
    r.prompt[static_cast<size_t>(at)] = id;
    const auto got = engine.add(r, 0.0);
    ASSERT_TRUE(got.has_value()) << id;
    EXPECT_NE(got->error.find("index " + std::to_string(at)), std::string::npos) << got->error;
  }
  Request last_id = make_request(5, 40, 4);
  last_id.prompt[33] = 255;
  EXPECT_FALSE(engine.add(last_id, 0.0).has_value());
  Request bad_temp = make_request(2, 5, 4);
  bad_temp.sampling.temperature = -1.0f;
  EXPECT_NE(engine.add(bad_temp, 0.0)->error.find("temperature"), std::string::npos);
  for (float t : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    bad_temp.sampling.temperature = t;  // the sampler would throw mid-run
    const auto r = engine.add(bad_temp, 0.0);
    ASSERT_TRUE(r.has_value()) << t;
    EXPECT_NE(r->error.find("finite"), std::string::npos) << r->error;
  }
  Request bad_top_p = make_request(2, 5, 4);
  bad_top_p.sampling.top_p = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(engine.add(bad_top_p, 0.0)->error.find("top_p"), std::string::npos);
  EXPECT_FALSE(engine.add(make_request(3, 5, 4), 0.0).has_value());
  auto dup = engine.add(make_request(3, 5, 4), 0.0);
  ASSERT_TRUE(dup.has_value());
  EXPECT_NE(dup->error.find("already in flight"), std::string::npos);
  EXPECT_EQ(dup->reason, FinishReason::rejected);
}

TEST(EngineAdd, WorstCaseLargerThanTheArenaIsRejected) {
  // 4 blocks = 64 slots; a request that will reach 66 tokens (65 with K/V) can never fit, one
  // that reaches 65 tokens fits: its last token's K/V is never computed.
  for (const SchedulerConfig& sched : {static_sched(4, 0.0), dynamic_sched(4, 0.0), continuous_sched(8, 512, false)}) {
    Engine engine(paged_config(sched, 64 * kSlotBytes), sim_backend());
    auto r = engine.add(make_request(0, 50, 16), 0.0);
    ASSERT_TRUE(r.has_value()) << to_string(sched.kind);
    EXPECT_NE(r->error.find("engine.kv_cache_bytes"), std::string::npos) << r->error;
    EXPECT_FALSE(engine.add(make_request(1, 50, 15), 0.0).has_value()) << to_string(sched.kind);
    RunResult done = run_virtual(engine, {});
    ASSERT_EQ(done.finished.size(), 1u);
    EXPECT_EQ(done.at(1).n_output, 15) << done.at(1).error;
  }
}

TEST(EngineStep, StopsAtEosUnlessIgnored) {
  // The sim's tokens are a pure function of (seed, sample, position): learn the 4th one, then
  // make it the model's EOS.
  Request q = make_request(0, 10, 8);
  Engine probe(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend());
  const std::vector<TokenId> free_run = run_virtual(probe, at_zero({q})).at(0).outputs[0];
  ASSERT_EQ(free_run.size(), 8u);
  ModelConfig m = micro_model();
  m.eos_token = free_run[3];
  const size_t first_eos = std::find(free_run.begin(), free_run.end(), m.eos_token) - free_run.begin();

  Engine ignoring(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend(m));
  EXPECT_EQ(run_virtual(ignoring, at_zero({q})).at(0).n_output, 8);

  q.sampling.ignore_eos = false;
  Engine stopping(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend(m));
  const FinishedRequest f = run_virtual(stopping, at_zero({q})).at(0);
  EXPECT_EQ(f.reason, FinishReason::eos);
  EXPECT_EQ(f.n_output, static_cast<int>(first_eos) + 1);
  EXPECT_EQ(f.outputs[0].back(), m.eos_token);
}

TEST(EngineStep, ParallelSamplesShareThePromptAndReportEachOutput) {
  for (const SchedulerConfig& sched : {static_sched(2, 0.0), dynamic_sched(2, 0.0), continuous_sched(8, 512, true)}) {
    Engine engine(paged_config(sched, 1 << 20), sim_backend());
    Request q = make_request(0, 40, 6);
    q.sampling.n = 3;
    q.sampling.temperature = 1.0f;
    RunResult r = run_virtual(engine, at_zero({q, make_request(1, 20, 3)}));
    const FinishedRequest& f = r.at(0);
    ASSERT_EQ(f.reason, FinishReason::length) << f.error;
    ASSERT_EQ(f.outputs.size(), 3u);
    std::set<std::vector<TokenId>> distinct;
    for (const auto& o : f.outputs) {
      EXPECT_EQ(o.size(), 6u);
      distinct.insert(o);
    }
    EXPECT_EQ(distinct.size(), 3u) << "the sim's draws depend on the sample index";
    EXPECT_EQ(f.n_output, 6);
    EXPECT_EQ(f.token_times_s.size(), 6u);
    // Every sample's first token came from the one prefill: the forks start at the prompt's end
    // and compute only their own tokens, never the prompt (or its last position) again.
    int64_t computed = 0;
    for (const auto& s : r.steps) computed += s.n_tokens;
    EXPECT_EQ(computed, (40 + 5) + 2 * 5 + (20 + 2)) << to_string(sched.kind);
    EXPECT_DOUBLE_EQ(f.first_token_s, r.steps.front().start_s + r.steps.front().duration_s);
  }
}

TEST(EngineStep, ParallelSamplesOfABlockAlignedPromptNeverRewriteACachedBlock) {
  // A 32-token prompt fills two blocks exactly; one output token each, so the parent releases its
  // blocks right after the prefill. Another request with the same prompt start then finds them
  // in the prefix cache. Samples must not recompute the last prompt position into them.
  for (bool chunked : {false, true}) {
    Engine engine(paged_config(continuous_sched(8, 512, chunked), 1 << 20), sim_backend());
    Request q = make_request(0, 32, 1);
    q.sampling.n = 3;
    Request other = make_request(1, 40, 3);
    std::copy_n(q.prompt.begin(), 32, other.prompt.begin());
    RunResult r;
    ASSERT_NO_THROW(r = run_virtual(engine, {{0.0, q}, {0.0, other}}));
    ASSERT_EQ(r.finished.size(), 2u);
    const FinishedRequest& f = r.at(0);
    ASSERT_EQ(f.reason, FinishReason::length) << f.error;
    for (const auto& o : f.outputs) EXPECT_EQ(o.size(), 1u);
    EXPECT_EQ(f.n_output, 1);
    EXPECT_EQ(r.at(1).n_output, 3);
    int64_t computed = 0;
    for (const auto& s : r.steps) computed += s.n_tokens;
    EXPECT_EQ(computed, 32 + (40 + 2)) << "chunked " << chunked;  // the forks computed nothing
  }
}

TEST(EngineStep, ParallelSamplesRecordOneConsistentSampleSet) {
  // Learn the samples' free-running outputs, then make a token that sample 0 draws early the EOS:
  // sample 0 stops first, the request ends with its longest sample.
  Request q = make_request(0, 12, 8);
  q.sampling.n = 2;
  Engine probe(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend());
  const FinishedRequest free_run = run_virtual(probe, at_zero({q})).at(0);
  const std::vector<TokenId>& s0 = free_run.outputs[0];
  const std::vector<TokenId>& s1 = free_run.outputs[1];
  ModelConfig m = micro_model();
  m.eos_token = -1;
  for (size_t i = 1; i < 5 && m.eos_token < 0; ++i)
    if (std::find(s1.begin(), s1.end(), s0[i]) == s1.end() && std::find(s0.begin(), s0.begin() + i, s0[i]) == s0.begin() + i)
      m.eos_token = s0[i];
  ASSERT_GE(m.eos_token, 0) << "no token of sample 0 is absent from sample 1";
  q.sampling.ignore_eos = false;
  Engine engine(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend(m));
  const FinishedRequest f = run_virtual(engine, at_zero({q})).at(0);
  ASSERT_LT(f.outputs[0].size(), 8u);
  ASSERT_EQ(f.outputs[1].size(), 8u);
  EXPECT_EQ(f.n_output, 8);
  ASSERT_EQ(f.token_times_s.size(), 8u);
  EXPECT_DOUBLE_EQ(f.token_times_s.back(), f.end_s);
  EXPECT_DOUBLE_EQ(f.token_times_s.front(), f.first_token_s);
  EXPECT_TRUE(std::is_sorted(f.token_times_s.begin(), f.token_times_s.end()));
}

TEST(EngineStep, SharedPromptPrefixIsNotComputedTwice) {
  Engine engine(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend());
  Request a = make_request(0, 40, 2), b = make_request(1, 45, 2);
  std::copy_n(a.prompt.begin(), 32, b.prompt.begin());
  RunResult r = run_virtual(engine, {{0.0, a}, {1.0, b}});
  ASSERT_EQ(r.finished.size(), 2u);
  ASSERT_GE(r.steps.size(), 3u);
  EXPECT_EQ(r.steps[0].n_tokens, 40);
  EXPECT_EQ(r.steps[2].n_tokens, 45 - 32);  // two full blocks came from the prefix cache
  EXPECT_DOUBLE_EQ(r.steps[2].start_s, 1.0);
}

TEST(EngineStep, OutcomeCarriesTheKvBreakdown) {
  Engine engine(paged_config(continuous_sched(8, 512, false), 1 << 20), sim_backend());
  ASSERT_FALSE(engine.add(make_request(0, 20, 10), 0.0).has_value());
  StepOutcome s = engine.step(0.0);
  EXPECT_EQ(s.batch_size, 1);
  EXPECT_EQ(s.n_tokens, 20);
  EXPECT_EQ(s.kv.capacity, (1 << 20) / kSlotBytes);
  EXPECT_EQ(s.kv.stored, 20);
  EXPECT_EQ(s.kv.stored + s.kv.reserved + s.kv.internal_frag, 32);  // two blocks
  EXPECT_EQ(s.kv.used() + s.kv.free + s.kv.external_frag, s.kv.capacity);
  EXPECT_EQ(s.n_running, 1);
  EXPECT_GT(s.duration_s, 0.0);
  ASSERT_EQ(s.tokens.size(), 1u);
  EXPECT_DOUBLE_EQ(s.tokens[0].time_s, s.duration_s);
  // Turned off (a driver that only counts steps): the step is the same, the breakdown left zero.
  engine.set_kv_breakdown(false);
  const StepOutcome off = engine.step(s.duration_s);
  EXPECT_EQ(off.batch_size, 1);
  EXPECT_EQ(off.n_running, 1);
  EXPECT_EQ(off.kv.capacity, 0);
  EXPECT_EQ(off.kv.stored, 0);
  engine.set_kv_breakdown(true);
  const StepOutcome on = engine.step(off.start_s + off.duration_s);
  EXPECT_EQ(on.kv.capacity, s.kv.capacity);
  EXPECT_EQ(on.kv.stored, 22);
}

TEST(EngineAbort, AbortAllReturnsEverythingInFlight) {
  Engine engine(paged_config(continuous_sched(2, 512, false), 1 << 20), sim_backend());
  for (int i = 0; i < 5; ++i) ASSERT_FALSE(engine.add(make_request(i, 10, 50), 0.0).has_value());
  engine.step(0.0);
  engine.step(0.1);
  auto aborted = engine.abort_all(0.2);
  ASSERT_EQ(aborted.size(), 5u);
  for (const auto& f : aborted) {
    EXPECT_EQ(f.reason, FinishReason::aborted);
    EXPECT_DOUBLE_EQ(f.end_s, 0.2);
  }
  EXPECT_EQ(aborted[0].n_output, 2);
  EXPECT_EQ(aborted[4].n_output, 0);
  EXPECT_FALSE(engine.has_work());
  EXPECT_EQ(engine.step(0.3).kv.used(), 0);
}

TEST(EngineSwapSpace, SwappedRequestsGiveTheirHostBlocksBackWhenAborted) {
  // 12 blocks for 8 growing requests: swap preemption holds some of them in the host pool.
  Engine engine(paged_config(continuous_sched(8, 256, false, PreemptMode::swap), 12 * 16 * 256), sim_backend());
  const SwapSpace* swap = engine.swap_space();
  ASSERT_NE(swap, nullptr);
  EXPECT_EQ(swap->capacity_slots(), (4ll << 30) / 256);  // the 4 GiB default over 256-byte slots
  for (int i = 0; i < 8; ++i) ASSERT_FALSE(engine.add(make_request(i, 20 + 3 * i, 40), 0.0).has_value());
  double t = 0.0;
  for (int step = 0; step < 400 && swap->free_slots() == swap->capacity_slots(); ++step) {
    t += 0.01;
    engine.step(t);
    engine.check_invariants();
  }
  ASSERT_LT(swap->free_slots(), swap->capacity_slots()) << "no request was swapped out";
  const auto aborted = engine.abort_all(t + 1.0);
  EXPECT_EQ(aborted.size(), 8u);
  EXPECT_EQ(swap->free_slots(), swap->capacity_slots());
  engine.check_invariants();
}

TEST(EngineSwapSpace, OnlyASwappingPolicyGetsAPoolAndItsSizeIsChecked) {
  Engine recompute(paged_config(continuous_sched(8, 256, false), 1 << 20), sim_backend());
  EXPECT_EQ(recompute.swap_space(), nullptr);
  EngineConfig c = paged_config(continuous_sched(8, 256, false, PreemptMode::swap), 1 << 20);
  c.swap_space_bytes = -1;
  try {
    c.validate();
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("engine.swap_space"), std::string::npos) << e.what();
  }
  c.swap_space_bytes = EngineConfig::kMaxSwapSpaceBytes + 1;
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c.swap_space_bytes = 100;  // less than one block of 16 slots: every swap preemption recomputes
  Engine tiny(c, sim_backend());
  EXPECT_EQ(tiny.swap_space()->capacity_slots(), 0);
}

TEST(EngineConfig, TheBackendReservesTheLargestStepOnce) {
  std::vector<StepLimits> seen;
  EngineConfig paged = paged_config(continuous_sched(48, 1024, true), 4096 * kSlotBytes, 32);
  paged.kv.max_model_len = 200;  // the micro model's max_position is 256
  { Engine engine(paged, std::make_unique<ReservingBackend>(seen)); }
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].max_rows, 1024);  // max_num_batched_tokens
  EXPECT_EQ(seen[0].max_seqs, 48);
  EXPECT_EQ(seen[0].max_context, 200);
  EXPECT_EQ(seen[0].block_size, 32);

  EngineConfig naive = paged_config(static_sched(6, 10.0), 4096 * kSlotBytes);
  naive.kv.kind = KvKind::naive;
  naive.kv.max_model_len = 1000;  // capped at max_position
  { Engine engine(naive, std::make_unique<ReservingBackend>(seen)); }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].max_rows, 6 * 256);  // a full static batch of the longest prompts
  EXPECT_EQ(seen[1].max_context, 256);
  EXPECT_EQ(seen[1].max_seqs, 6);
  EXPECT_EQ(seen[1].block_size, 0);       // naive: no blocks
}

}  // namespace
}  // namespace servelab
