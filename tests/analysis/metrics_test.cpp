#include "analysis/metrics.h"
#include "loadgen/records/record.h"
#include "loadgen/records/step_record.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

namespace servelab::analysis {
namespace {

constexpr double kTol = 1e-9;

RequestRecord ok_record(uint64_t id, double arrival, double sent, std::vector<double> tokens, int prompt) {
  RequestRecord r;
  r.run = "r";
  r.id = id;
  r.arrival_s = arrival;
  r.sent_s = sent;
  r.first_token_s = tokens.front();
  r.end_s = tokens.back();
  r.output_tokens = static_cast<int>(tokens.size());
  r.token_times_s = std::move(tokens);
  r.prompt_tokens = prompt;
  return r;
}

/// The hand-worked example every metric test below uses:
///   A: arrival 0.0, sent 0.0005, tokens 0.10 0.15 0.25, prompt 10 → TTFT 100, E2E 250, TPOT 75,
///      ITL 50 100, lateness 0.5 ms
///   B: arrival 1.0, sent 1.002, one token at 1.3, prompt 20 → TTFT 300, E2E 300, no TPOT, lateness 2
///   C: arrival 2.0, sent 2.0, tokens 2.05 2.25 2.45 2.65, prompt 5 → TTFT 50, E2E 650, TPOT 200,
///      ITL 200 200 200
///   D: arrival 3.0, sent 3.0, status error, ended 3.5
///   W: warm-up, arrival -0.5, ended 5.0 (must change nothing)
///   X: another run's record (must change nothing)
/// Window: 0.0 → 3.5 s. Default SLO (1000 ms, 150 ms): A and B meet, C misses TPOT, D failed.
std::vector<RequestRecord> example_records() {
  std::vector<RequestRecord> v;
  v.push_back(ok_record(1, 0.0, 0.0005, {0.10, 0.15, 0.25}, 10));
  v.push_back(ok_record(2, 1.0, 1.002, {1.3}, 20));
  v.push_back(ok_record(3, 2.0, 2.0, {2.05, 2.25, 2.45, 2.65}, 5));
  RequestRecord d;
  d.run = "r";
  d.id = 4;
  d.arrival_s = d.sent_s = 3.0;
  d.end_s = 3.5;
  d.prompt_tokens = 7;
  d.status = RecordStatus::error;
  d.error = "connection reset";
  v.push_back(d);
  RequestRecord w = ok_record(0, -0.5, -0.5, {4.0, 5.0}, 100);
  w.warmup = true;
  v.push_back(w);
  RequestRecord x = ok_record(9, 0.0, 0.0, {9.0, 10.0}, 100);
  x.run = "other";
  v.push_back(x);
  return v;
}

TEST(Metrics, LatencyDistributionsByHand) {
  const RunMetrics m = compute_metrics("r", example_records(), {}, SloSpec{});
  // TTFT {100, 300, 50} → sorted 50 100 300.
  EXPECT_EQ(m.ttft_ms.n, 3u);
  EXPECT_NEAR(m.ttft_ms.mean, 150.0, kTol);
  EXPECT_NEAR(m.ttft_ms.p50, 100.0, kTol);
  EXPECT_NEAR(m.ttft_ms.p90, 260.0, kTol);  // h = 1.8: 100 + 0.8 × 200
  EXPECT_NEAR(m.ttft_ms.max, 300.0, kTol);
  // E2E {250, 300, 650}.
  EXPECT_NEAR(m.e2e_ms.mean, 400.0, kTol);
  EXPECT_NEAR(m.e2e_ms.p50, 300.0, kTol);
  // TPOT only for A (75) and C (200): B has one token.
  EXPECT_EQ(m.tpot_ms.n, 2u);
  EXPECT_NEAR(m.tpot_ms.p50, 137.5, kTol);
  EXPECT_NEAR(m.tpot_ms.max, 200.0, kTol);
  // ITL pooled {50, 100, 200, 200, 200}.
  EXPECT_EQ(m.itl_ms.n, 5u);
  EXPECT_NEAR(m.itl_ms.mean, 150.0, kTol);
  EXPECT_NEAR(m.itl_ms.p50, 200.0, kTol);
  EXPECT_NEAR(m.itl_ms.p90, 200.0, kTol);
  EXPECT_NEAR(percentile_of_sorted(std::vector<double>{50, 100, 200, 200, 200}, 10), 70.0, kTol);
}

// Issue 6 item 2: TTFT splits into queueing (scheduled − arrival) and prefill (first token −
// scheduled), over ok requests that were scheduled; summary.json carries both.
TEST(Metrics, TtftSplitsIntoQueueAndPrefill) {
  auto v = example_records();
  v[0].scheduled_s = 0.04;  // A: TTFT 100 = queue 40 + prefill 60
  v[2].scheduled_s = 2.01;  // C: TTFT 50 = queue 10 + prefill 40
  // B has no scheduled_s (an older record): left out of both; D failed.
  const RunMetrics m = compute_metrics("r", v, {}, SloSpec{});
  EXPECT_EQ(m.queue_ms.n, 2u);
  EXPECT_NEAR(m.queue_ms.mean, 25.0, kTol);
  EXPECT_NEAR(m.queue_ms.max, 40.0, kTol);
  EXPECT_EQ(m.prefill_ms.n, 2u);
  EXPECT_NEAR(m.prefill_ms.p50, 50.0, kTol);
  const nlohmann::ordered_json j = m;
  EXPECT_NEAR(j["queue_ms"]["max"].get<double>(), 40.0, 1e-9);
  EXPECT_NEAR(j["prefill_ms"]["mean"].get<double>(), 50.0, 1e-9);
  EXPECT_EQ(j.get<RunMetrics>().prefill_ms.n, 1u);  // read back (the count is not stored)
  // No record scheduled: null blocks, not 0.
  const nlohmann::ordered_json none = compute_metrics("r", example_records(), {}, SloSpec{});
  EXPECT_TRUE(none["queue_ms"]["p50"].is_null());
  EXPECT_TRUE(none["prefill_ms"]["p50"].is_null());
}

TEST(Metrics, LatenessOverEverySentRequestAndItsWarning) {
  const RunMetrics m = compute_metrics("r", example_records(), {}, SloSpec{});
  // {0.5, 2, 0, 0} ms → sorted 0 0 0.5 2; p99: h = 2.97 → 0.5 + 0.97 × 1.5 = 1.955 > 1 ms.
  EXPECT_EQ(m.lateness_ms.n, 4u);
  EXPECT_NEAR(m.lateness_ms.mean, 0.625, 1e-6);
  EXPECT_NEAR(m.lateness_ms.p50, 0.25, 1e-6);
  EXPECT_NEAR(m.lateness_ms.p99, 1.955, 1e-6);
  EXPECT_TRUE(m.lateness_warning);

  auto on_time = example_records();
  for (auto& r : on_time) r.sent_s = r.arrival_s;
  EXPECT_FALSE(compute_metrics("r", on_time, {}, SloSpec{}).lateness_warning);
}

TEST(Metrics, MaxConcurrencyWaitIsNotLateness) {
  // Every request held 2 s by a max-concurrency cap, then sent on time: the workload's wait (it
  // still counts in TTFT, from arrival), not the generator falling behind schedule.
  auto held = example_records();
  for (auto& r : held) {
    r.released_s = std::min(r.arrival_s + 0.002, r.first_token_s >= 0 ? r.first_token_s : r.arrival_s + 0.002);
    r.sent_s = r.released_s;
  }
  const RunMetrics m = compute_metrics("r", held, {}, SloSpec{});
  EXPECT_EQ(m.lateness_ms.max, 0.0);
  EXPECT_FALSE(m.lateness_warning);
  // The record keeps released_s through its JSON line.
  const RequestRecord back = nlohmann::json::parse(record_line(held[0])).get<RequestRecord>();
  EXPECT_EQ(back.released_s, held[0].released_s);
  EXPECT_EQ(back.lateness_s(), 0.0);
}

TEST(Metrics, CountsWindowAndThroughputByHand) {
  const RunMetrics m = compute_metrics("r", example_records(), {}, SloSpec{});
  EXPECT_EQ(m.n_requests, 4u);
  EXPECT_EQ(m.n_ok, 3u);
  EXPECT_EQ(m.n_failed, 1u);
  EXPECT_EQ(m.n_warmup, 1u);
  EXPECT_EQ(m.n_output_tokens, 8);
  EXPECT_EQ(m.n_prompt_tokens, 35);  // ok requests only: 10 + 20 + 5
  EXPECT_NEAR(m.window_start_s, 0.0, kTol);
  EXPECT_NEAR(m.duration_s, 3.5, kTol);  // the failed request's end closes the window
  EXPECT_NEAR(m.request_throughput, 3.0 / 3.5, kTol);
  EXPECT_NEAR(m.output_throughput, 8.0 / 3.5, kTol);
  EXPECT_NEAR(m.total_throughput, 43.0 / 3.5, kTol);
}

TEST(Metrics, GoodputAndAttainmentByHand) {
  const RunMetrics m = compute_metrics("r", example_records(), {}, SloSpec{});
  EXPECT_EQ(m.n_slo_met, 2u);               // A and B
  EXPECT_NEAR(m.goodput, 4.0 / 3.5, kTol);  // 3 + 1 tokens
  EXPECT_NEAR(m.request_goodput, 2.0 / 3.5, kTol);
  EXPECT_NEAR(m.slo_attainment, 0.5, kTol);  // 2 of 4: the failed request counts against

  SloSpec loose;
  loose.tpot_ms = 250;  // C now meets too
  const RunMetrics l = compute_metrics("r", example_records(), {}, loose);
  EXPECT_NEAR(l.slo_attainment, 0.75, kTol);
  EXPECT_NEAR(l.goodput, 8.0 / 3.5, kTol);

  SloSpec tight;
  tight.ttft_ms = 200;  // B (TTFT 300) misses; A still meets; C misses TPOT
  const RunMetrics t = compute_metrics("r", example_records(), {}, tight);
  EXPECT_EQ(t.n_slo_met, 1u);
  EXPECT_NEAR(t.goodput, 3.0 / 3.5, kTol);
}

TEST(Metrics, SloBoundsAreInclusiveDespiteRoundingError) {
  SloSpec exact;
  exact.ttft_ms = 300;  // B's TTFT computes as 300.00000000000006
  exact.tpot_ms = 200;  // C's TPOT exactly at the bound
  const RunMetrics m = compute_metrics("r", example_records(), {}, exact);
  EXPECT_EQ(m.n_slo_met, 3u);
}

TEST(Metrics, OneTokenRequestMeetsTheTpotPart) {
  SloSpec strict;
  strict.tpot_ms = 0.001;  // nobody with 2+ tokens meets it
  const RunMetrics m = compute_metrics("r", example_records(), {}, strict);
  EXPECT_EQ(m.n_slo_met, 1u);  // B alone
  EXPECT_NEAR(m.goodput, 1.0 / 3.5, kTol);
}

TEST(Metrics, ItlSplitsAChunkGapEvenlyOverItsTokens) {
  RequestRecord r;
  r.run = "r";
  r.output_tokens = 6;
  // Chunks: 2 tokens at 1.0, 3 at 1.2, 1 at 1.5.
  r.token_times_s = {1.0, 1.0, 1.2, 1.2, 1.2, 1.5};
  std::vector<double> gaps;
  itl_gaps(r, gaps);
  ASSERT_EQ(gaps.size(), 5u);
  EXPECT_DOUBLE_EQ(gaps[0], 0.0);  // the first chunk's second token
  for (int i = 1; i <= 3; ++i) EXPECT_NEAR(gaps[i], 200.0 / 3, 1e-9);
  EXPECT_NEAR(gaps[4], 300.0, 1e-9);
}

TEST(Metrics, ItlWithFewerTimesThanTokensSpreadsTokensOverChunks) {
  RequestRecord r;
  r.run = "r";
  r.output_tokens = 6;
  r.token_times_s = {1.0, 1.2, 1.5};  // 5 later tokens over 2 later chunks: 3 then 2
  std::vector<double> gaps;
  itl_gaps(r, gaps);
  ASSERT_EQ(gaps.size(), 5u);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(gaps[i], 200.0 / 3, 1e-9);
  EXPECT_NEAR(gaps[3], 150.0, 1e-9);
  EXPECT_NEAR(gaps[4], 150.0, 1e-9);

  r.token_times_s = {1.0};  // everything in one chunk
  gaps.clear();
  itl_gaps(r, gaps);
  EXPECT_EQ(gaps, std::vector<double>(5, 0.0));
}

TEST(Metrics, ItlRejectsInconsistentRecords) {
  RequestRecord r;
  r.run = "r";
  r.id = 12;
  r.output_tokens = 2;
  r.token_times_s = {1.0, 1.1, 1.2};
  std::vector<double> gaps;
  try {
    itl_gaps(r, gaps);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("request 12"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("output_tokens is 2"), std::string::npos) << e.what();
  }
  r.output_tokens = 3;
  r.token_times_s = {1.0, 0.9, 1.2};
  EXPECT_THROW(itl_gaps(r, gaps), std::invalid_argument);
}

TEST(Metrics, OkRecordWithoutFirstTokenIsAnError) {
  auto v = example_records();
  v[0].first_token_s = -1;
  EXPECT_THROW(compute_metrics("r", v, {}, SloSpec{}), std::invalid_argument);
}

StepRecord step(const std::string& run, int batch, int64_t stored, int64_t reserved, int64_t internal,
                int64_t external, int64_t free_slots) {
  StepRecord s;
  s.run = run;
  s.batch_size = batch;
  s.kv_capacity = 100;
  s.kv_stored = stored;
  s.kv_reserved = reserved;
  s.kv_internal_frag = internal;
  s.kv_external_frag = external;
  s.kv_free = free_slots;
  return s;
}

TEST(Metrics, KvUtilizationBreakdownAndPeakByHand) {
  const std::vector<StepRecord> steps = {
      step("r", 2, 20, 30, 10, 5, 35),   // used 60: utilization 1/3
      step("r", 3, 40, 10, 0, 0, 50),    // used 50: utilization 0.8
      step("r", 0, 0, 0, 0, 0, 100),     // idle: left out of utilization and the breakdown
      step("other", 9, 100, 0, 0, 0, 0)  // another run
  };
  std::vector<StepRecord> timed = steps;  // one second each, back to back
  for (std::size_t i = 0; i < timed.size(); ++i) {
    timed[i].start_s = static_cast<double>(i);
    timed[i].duration_s = 1.0;
  }
  const KvMetrics kv = compute_kv_metrics("r", timed, 0.0, 10.0);
  EXPECT_EQ(kv.n_steps, 3u);
  EXPECT_EQ(kv.n_steps_used, 2u);
  EXPECT_NEAR(kv.utilization_mean, (1.0 / 3 + 0.8) / 2, kTol);
  EXPECT_NEAR(kv.utilization_max, 0.8, kTol);
  EXPECT_NEAR(kv.breakdown.stored, 0.3, kTol);
  EXPECT_NEAR(kv.breakdown.reserved, 0.2, kTol);
  EXPECT_NEAR(kv.breakdown.internal_frag, 0.05, kTol);
  EXPECT_NEAR(kv.breakdown.external_frag, 0.025, kTol);
  EXPECT_NEAR(kv.breakdown.free, 0.425, kTol);
  EXPECT_NEAR(kv.peak_use, 0.6, kTol);
  EXPECT_NEAR(kv.batch_size_mean, 5.0 / 3, kTol);
  EXPECT_EQ(kv.batch_size_max, 3);

  const RunMetrics m = compute_metrics("r", example_records(), timed, SloSpec{});
  const nlohmann::ordered_json j = m;
  EXPECT_NEAR(j["kv_utilization"]["mean"].get<double>(), 0.566667, 1e-12);  // rounded to 6 places
  EXPECT_EQ(j["kv_utilization"]["max"].get<double>(), 0.8);
}

TEST(Metrics, StructuredOutputCountsSumOverTheWindowAndRoundTrip) {
  std::vector<StepRecord> steps = {step("r", 2, 20, 30, 10, 5, 35), step("r", 3, 40, 10, 0, 0, 50),
                                   step("r", 3, 40, 10, 0, 0, 50)};
  for (std::size_t i = 0; i < steps.size(); ++i) {
    steps[i].start_s = static_cast<double>(i);
    steps[i].duration_s = 1.0;
  }
  steps[0].n_masks = 2;
  steps[0].mask_s = 0.25;
  steps[1].n_masks = 3;
  steps[1].mask_s = 0.5;
  steps[1].jump_forward_tokens = 7;
  steps[2].start_s = 20.0;  // outside the window
  steps[2].n_masks = 100;
  // A step record keeps them through its JSON line; a step without any writes no "structured".
  const StepRecord back = nlohmann::json::parse(step_line(steps[1])).get<StepRecord>();
  EXPECT_EQ(back.n_masks, 3);
  EXPECT_EQ(back.mask_s, 0.5);
  EXPECT_EQ(back.jump_forward_tokens, 7);
  EXPECT_EQ(nlohmann::json::parse(step_line(step("r", 1, 1, 0, 0, 0, 1))).count("structured"), 0u);
  // The host split around the forward (real backends only): kept, and absent without a forward.
  EXPECT_EQ(nlohmann::json::parse(step_line(steps[1])).count("host"), 0u);
  steps[1].host_before_s = 0.125;
  steps[1].forward_s = 0.5;
  steps[1].host_after_s = 0.25;
  const StepRecord timed = nlohmann::json::parse(step_line(steps[1])).get<StepRecord>();
  EXPECT_EQ(timed.host_before_s, 0.125);
  EXPECT_EQ(timed.forward_s, 0.5);
  EXPECT_EQ(timed.host_after_s, 0.25);
  EXPECT_EQ(timed.device_s, 0.0);  // not measured: absent, read back as 0
  EXPECT_EQ(nlohmann::json::parse(step_line(steps[1]))["host"].count("device_s"), 0u);
  steps[1].device_s = 0.375;
  steps[1].max_context = 300;
  const StepRecord on_device = nlohmann::json::parse(step_line(steps[1])).get<StepRecord>();
  EXPECT_EQ(on_device.device_s, 0.375);
  EXPECT_EQ(on_device.max_context, 300);
  steps[1].max_context = -1;
  EXPECT_THROW(steps[1].validate(), std::invalid_argument);
  steps[1].max_context = 300;
  const KvMetrics kv = compute_kv_metrics("r", steps, 0.0, 10.0);
  EXPECT_EQ(kv.structured_masks, 5);
  EXPECT_NEAR(kv.structured_mask_s, 0.75, kTol);
  EXPECT_EQ(kv.jump_forward_tokens, 7);
  RunMetrics m = compute_metrics("r", example_records(), steps, SloSpec{});
  m.kv = kv;
  const nlohmann::ordered_json j = m;
  EXPECT_EQ(j["structured_engine"]["jump_forward_tokens"].get<int64_t>(), 7);
  RunMetrics read;
  from_json(j, read);
  EXPECT_EQ(read.kv.structured_masks, 5);
  EXPECT_EQ(read.kv.jump_forward_tokens, 7);
}

StepRecord timed_step(double start, double duration, int batch, int64_t stored, int64_t reserved,
                      int64_t internal, int64_t free_slots) {
  StepRecord s = step("r", batch, stored, reserved, internal, 0, free_slots);
  s.start_s = start;
  s.duration_s = duration;
  return s;
}

// Issue 6 item 7: KV figures cover only the measurement window (first measured arrival 0.0 →
// last finish 3.5 s, as throughput's) and weigh each step by its time inside it.
TEST(Metrics, KvFiguresAreClippedToTheWindowAndWeightedByStepTime) {
  const std::vector<StepRecord> steps = {
      timed_step(-1.0, 0.5, 8, 100, 0, 0, 0),   // warm-up, before the window: left out
      timed_step(0.0, 3.0, 2, 20, 30, 10, 40),  // 3 s: utilization 1/3, use 0.6
      timed_step(3.0, 1.0, 4, 40, 10, 0, 50),   // 0.5 s of it in the window: utilization 0.8
      timed_step(4.0, 1.0, 9, 90, 10, 0, 0),    // after the last finish: left out
  };
  const RunMetrics m = compute_metrics("r", example_records(), steps, SloSpec{});
  EXPECT_EQ(m.kv.n_steps, 2u);
  EXPECT_EQ(m.kv.n_steps_used, 2u);
  EXPECT_NEAR(m.kv.utilization_mean, (3.0 / 3 + 0.5 * 0.8) / 3.5, kTol);  // 0.4
  EXPECT_NEAR(m.kv.utilization_max, 0.8, kTol);
  EXPECT_NEAR(m.kv.breakdown.stored, (3.0 * 0.2 + 0.5 * 0.4) / 3.5, kTol);
  EXPECT_NEAR(m.kv.breakdown.free, (3.0 * 0.4 + 0.5 * 0.5) / 3.5, kTol);
  EXPECT_NEAR(m.kv.peak_use, 0.6, kTol);
  EXPECT_NEAR(m.kv.batch_size_mean, (3.0 * 2 + 0.5 * 4) / 3.5, kTol);
  EXPECT_EQ(m.kv.batch_size_max, 4);
}

// Issue 6 item 10: a run with no measured record has no throughput, goodput or attainment
// (null), not 0 — a 0 would read as "measured and terrible" and pass an upper-bound gate.
TEST(Metrics, EmptyRunHasNullThroughputGoodputAndAttainment) {
  auto v = example_records();
  for (auto& r : v) r.warmup = r.run == "r";  // only warm-up left
  const nlohmann::ordered_json j = compute_metrics("r", v, {}, SloSpec{});
  for (const char* k : {"request_throughput_rps", "output_throughput_tok_s", "total_throughput_tok_s",
                        "goodput_tok_s", "request_goodput_rps", "slo_attainment"})
    EXPECT_TRUE(j[k].is_null()) << k << " = " << j[k];
}

TEST(Metrics, NoStepsMeansNullKvFigures) {
  const nlohmann::ordered_json j = compute_metrics("r", example_records(), {}, SloSpec{});
  EXPECT_TRUE(j["kv_utilization"]["mean"].is_null());
  EXPECT_TRUE(j["kv_utilization"]["max"].is_null());
  EXPECT_TRUE(j["kv_breakdown"]["free"].is_null());
}

TEST(Metrics, JsonCarriesDesignKeysInOrderThenExtras) {
  const nlohmann::ordered_json j = compute_metrics("r", example_records(), {}, SloSpec{});
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  const std::vector<std::string> design = {
      "ttft_ms",        "tpot_ms",       "itl_ms",
      "e2e_ms",         "request_throughput_rps", "output_throughput_tok_s",
      "total_throughput_tok_s", "goodput_tok_s", "request_goodput_rps",
      "slo_attainment", "kv_utilization", "lateness_ms"};
  ASSERT_GE(keys.size(), design.size());
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + design.size()), design);
  for (const char* extra : {"kv_breakdown", "kv_peak_use", "n_ok", "n_warmup", "duration_s"})
    EXPECT_TRUE(j.contains(extra)) << extra;
  EXPECT_EQ(j["n_warmup"], 1);
  EXPECT_EQ(j["slo_attainment"], 0.5);
}

TEST(Metrics, JsonRoundTripKeepsTheNumbers) {
  const RunMetrics m = compute_metrics("r", example_records(), {}, SloSpec{});
  const nlohmann::ordered_json j = m;
  const RunMetrics back = j.get<RunMetrics>();
  EXPECT_EQ(nlohmann::ordered_json(back).dump(), j.dump());
}

TEST(Metrics, SloValidateNamesTheField) {
  SloSpec s;
  s.tpot_ms = -1;
  try {
    s.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("slo.tpot_ms"), std::string::npos);
  }
  s = SloSpec{};
  s.attainment = 1.5;
  EXPECT_THROW(s.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace servelab::analysis
