// Load shapes (issue 12): concurrency sweep, max-concurrency cap, rate ramp, multi-turn sessions,
// prefix groups, trace time-scaling. Plans are seeded; statistics are checked on fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "loadgen/plan.h"
#include "loadgen/sessions.h"
#include "loadgen/sources.h"
#include "loadgen/sweep.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace {

using testing_util::load_yaml;
using testing_util::scenario_errors;
using testing_util::write_temp;

std::string out_dir(const std::string& name) {
  return (std::filesystem::path(write_temp(name + "_marker", "")).parent_path() / name).string();
}

bool same_plan(const Plan& a, const Plan& b) {
  if (a.requests.size() != b.requests.size()) return false;
  for (size_t i = 0; i < a.requests.size(); ++i)
    if (a.requests[i].intended_s != b.requests[i].intended_s || a.requests[i].prompt != b.requests[i].prompt ||
        a.requests[i].output_tokens != b.requests[i].output_tokens)
      return false;
  return true;
}

TEST(RateRamp, TimeAtInvertsTheExpectedArrivals) {
  for (const RateRamp r : {RateRamp{2, 20, 10}, RateRamp{20, 2, 10}, RateRamp{5, 5, 3}}) {
    for (double t : {0.0, 0.5, 3.0, 7.5, 10.0, 14.0}) {
      // ∫₀ᵗ rate, by the trapezoid of the linear part plus the flat tail.
      const double in = std::min(t, r.duration);
      double u = in * (r.from + r.rate_at(in)) / 2.0;
      if (t > r.duration) u += (t - r.duration) * r.to;
      EXPECT_NEAR(r.time_at(u), t, 1e-9) << r.from << "->" << r.to << " t=" << t;
    }
  }
}

TEST(RateRamp, PlanRatesFollowTheRampOverWindowsAndAreSeeded) {
  const char* yaml =
      "seed: 11\n"
      "strategies: [{batching: continuous}]\n"
      "workload:\n"
      "  arrival: {process: poisson, rate: 5, ramp_to: 45}\n"
      "  n_requests: 5000\n"
      "  prompt_tokens: 8\n"
      "  output_tokens: 4\n";
  const Scenario s = load_yaml(yaml);
  const Plan plan = make_plan(s, 5);
  EXPECT_TRUE(same_plan(plan, make_plan(load_yaml(yaml), 5)));
  EXPECT_NE(make_plan(load_yaml(yaml, {"seed=12"}), 5).requests[10].intended_s, plan.requests[10].intended_s);
  // 5000 requests over a 5→45 ramp take 2·5000/50 = 200 s.
  EXPECT_DOUBLE_EQ(plan.ramp_duration_s, 200.0);
  EXPECT_DOUBLE_EQ(plan.ramp_to, 45.0);
  const RateRamp ramp{5, 45, 200};
  // Rate in each 40 s window: arrivals / 40 within 10% of the ramp's mean rate there.
  for (int w = 0; w < 5; ++w) {
    const double t0 = 40.0 * w, t1 = t0 + 40.0;
    const auto n = std::count_if(plan.requests.begin(), plan.requests.end(),
                                 [&](const PlannedRequest& r) { return r.intended_s >= t0 && r.intended_s < t1; });
    const double expected = (ramp.rate_at(t0) + ramp.rate_at(t1)) / 2.0;
    EXPECT_NEAR(static_cast<double>(n) / 40.0, expected, 0.1 * expected) << "window " << w;
  }
  // duration_s: the ramp spans it, and the rate at the end reaches ramp_to.
  const Plan d = make_plan(load_yaml(yaml, {"workload.n_requests=null", "workload.duration_s=100"}), 5);
  EXPECT_DOUBLE_EQ(d.ramp_duration_s, 100.0);
  EXPECT_NEAR(static_cast<double>(d.requests.size()), 100 * (5 + 45) / 2.0, 0.05 * 2500);
  EXPECT_LT(d.requests.back().intended_s, 100.0);
}

TEST(TraceSpeed, ReplaysTimestampsScaled) {
  write_temp("speed_trace.jsonl",
             "{\"timestamp\": 0, \"prompt_tokens\": 8, \"output_tokens\": 2}\n"
             "{\"timestamp\": 1.5, \"prompt_tokens\": 8, \"output_tokens\": 2}\n"
             "{\"timestamp\": 4, \"prompt_tokens\": 8, \"output_tokens\": 2}\n");
  const char* yaml = "strategies: [{batching: continuous}]\nworkload: {trace: speed_trace.jsonl, trace_speed: 4}\n";
  const Plan p = make_plan(load_yaml(yaml), 0);
  ASSERT_EQ(p.requests.size(), 3u);
  EXPECT_DOUBLE_EQ(p.requests[1].intended_s, 1.5 / 4);
  EXPECT_DOUBLE_EQ(p.requests[2].intended_s, 1.0);
  // duration_s counts replayed time: 0.5 s at 4x holds the first two.
  EXPECT_EQ(make_plan(load_yaml(yaml, {"workload.duration_s=0.5"}), 0).requests.size(), 2u);
  EXPECT_EQ(scenario_errors("strategies: [{batching: continuous}]\nworkload: {trace: speed_trace.jsonl, trace_speed: 0}\n"),
            std::vector<std::string>{"scn.yaml:2:51: workload.trace_speed must be > 0 (2 = twice as fast) (got 0)"});
  EXPECT_EQ(scenario_errors("strategies: [{batching: continuous}]\nworkload: {rates: [1], trace_speed: 2}\n"),
            std::vector<std::string>{"scn.yaml:2:37: workload.trace_speed applies to a trace replay (workload.trace)"});
}

TEST(PrefixGroups, EachGroupSharesItsSystemPromptWithItsFraction) {
  const Scenario s = load_yaml(
      "seed: 5\n"
      "strategies: [{batching: continuous}]\n"
      "workload:\n"
      "  rates: [4]\n"
      "  n_requests: 4000\n"
      "  shared_prefix_tokens: 3\n"
      "  prefix_groups: [{tokens: 20, fraction: 0.5}, {tokens: 10, fraction: 0.3}]\n"
      "  prompt_tokens: 6\n"
      "  output_tokens: 2\n");
  const Plan plan = make_plan(s, 4);
  std::map<int, int> count;
  std::map<int, std::vector<TokenId>> first;
  for (const PlannedRequest& r : plan.requests) {
    ++count[r.prefix_group];
    const size_t g_len = r.prefix_group == 0 ? 20 : r.prefix_group == 1 ? 10 : 0;
    ASSERT_EQ(r.prompt.size(), 3 + g_len + 6);
    const std::vector<TokenId> prefix(r.prompt.begin(), r.prompt.begin() + static_cast<long>(3 + g_len));
    auto [it, fresh] = first.emplace(r.prefix_group, prefix);
    if (!fresh) {
      EXPECT_EQ(prefix, it->second) << "group " << r.prefix_group;
    }
  }
  EXPECT_NEAR(count[0] / 4000.0, 0.5, 0.03);
  EXPECT_NEAR(count[1] / 4000.0, 0.3, 0.03);
  EXPECT_NEAR(count[-1] / 4000.0, 0.2, 0.03);
  // All share the scenario's shared prefix; the two groups' prompts differ.
  EXPECT_TRUE(std::equal(first[0].begin(), first[0].begin() + 3, first[1].begin()));
  EXPECT_NE(std::vector<TokenId>(first[0].begin() + 3, first[0].begin() + 13),
            std::vector<TokenId>(first[1].begin() + 3, first[1].end()));
  EXPECT_EQ(scenario_errors("strategies: [{batching: continuous}]\n"
                            "workload: {rates: [1], prefix_groups: [{tokens: 4, fraction: 0.7}, {tokens: 4, fraction: 0.6}]}\n"),
            std::vector<std::string>{"scn.yaml:2:39: workload.prefix_groups fractions must sum to at most 1 (got 1.3)"});
}

// In-flight count at each send, from the records: requests sent at or before t and not yet ended.
int max_in_flight(const std::vector<RequestRecord>& recs) {
  int most = 0;
  for (const RequestRecord& a : recs) {
    int n = 0;
    for (const RequestRecord& b : recs) n += b.sent_s <= a.sent_s && b.end_s > a.sent_s;
    most = std::max(most, n);
  }
  return most;
}

TEST(MaxConcurrency, CapIsNeverExceededAndItsWaitIsNotLateness) {
  const char* yaml =
      "seed: 2\n"
      "backend: {kind: sim}\n"
      "strategies: [{batching: continuous}]\n"
      "workload:\n"
      "  arrival: {process: poisson, rate: 400, max_concurrency: 3}\n"
      "  n_requests: 40\n"
      "  prompt_tokens: 64\n"
      "  output_tokens: 16\n";
  SweepOptions opts;
  opts.out_dir = out_dir("cap_run");
  const SweepOutcome capped = run_sweep(load_yaml(yaml), opts);
  ASSERT_EQ(capped.records.size(), 40u);
  EXPECT_EQ(max_in_flight(capped.records), 3);
  const Plan plan = make_plan(load_yaml(yaml), 400);
  double most_held = 0;
  for (const RequestRecord& r : capped.records) {
    EXPECT_EQ(r.status, RecordStatus::ok);
    EXPECT_DOUBLE_EQ(r.arrival_s, plan.requests[r.id].intended_s);  // latency counts from when it was due
    EXPECT_GE(r.sent_s, r.arrival_s);
    // The cap's wait (released_s) is the workload's; lateness is only the generator falling behind.
    EXPECT_EQ(r.lateness_s(), 0.0) << r.id;
    most_held = std::max(most_held, r.cap_wait_s());
  }
  EXPECT_GT(most_held, 0.0);
  // Without the cap the same load has more than 3 in flight, and nobody waits.
  const SweepOutcome open = run_sweep(load_yaml(yaml, {"workload.arrival.max_concurrency=0"}), opts);
  EXPECT_GT(max_in_flight(open.records), 3);
  for (const RequestRecord& r : open.records) EXPECT_EQ(r.lateness_s(), 0.0);
  EXPECT_EQ(scenario_errors("strategies: [{batching: continuous}]\nworkload: {arrival: {rate: 1, max_concurrency: -1}}\n"),
            std::vector<std::string>{
                "scn.yaml:2:48: workload.arrival.max_concurrency must be >= 1 requests in flight (0 = no cap) (got -1)"});
}

TEST(ConcurrencySweep, OneRunPerConcurrencyWithItsLabelAndConfig) {
  const char* yaml =
      "backend: {kind: sim}\n"
      "strategies: [{batching: continuous}]\n"
      "workload:\n"
      "  concurrency: [1, 4, 16]\n"
      "  n_requests: 32\n"
      "  prompt_tokens: 32\n"
      "  output_tokens: 8\n";
  const Scenario s = load_yaml(yaml);
  EXPECT_EQ(s.sweep_rates(), (std::vector<double>{1, 4, 16}));
  SweepOptions opts;
  opts.out_dir = out_dir("csweep_run");
  const SweepOutcome out = run_sweep(s, opts);
  ASSERT_EQ(out.runs.size(), 3u);
  std::map<std::string, std::vector<RequestRecord>> by_run;
  for (const RequestRecord& r : out.records) by_run[r.run].push_back(r);
  const int cs[] = {1, 4, 16};
  for (size_t i = 0; i < 3; ++i) {
    const SweepRun& run = out.runs[i];
    EXPECT_EQ(run.label, "continuous-paged@c" + std::to_string(cs[i]));
    EXPECT_EQ(run.config["concurrency"], cs[i]);
    ASSERT_EQ(by_run[run.label].size(), 32u);
    EXPECT_EQ(max_in_flight(by_run[run.label]), cs[i]);
  }
  EXPECT_EQ(scenario_errors("strategies: [{batching: continuous}]\nworkload: {concurrency: [2, 0, 2]}\n"),
            (std::vector<std::string>{"scn.yaml:2:29: workload.concurrency[1] must be >= 1 concurrent users (got 0)",
                                      "scn.yaml:2:32: workload.concurrency[2] repeats workload.concurrency[0] (2); "
                                      "each concurrency is one run"}));
  const auto gate = scenario_errors(
      "strategies: [{batching: continuous}]\nworkload: {concurrency: [1, 4]}\n"
      "gates: [{metric: goodput, min: 1, rate: 2}]\n");
  ASSERT_EQ(gate.size(), 1u);
  EXPECT_NE(gate[0].find("gates[0].rate selects a rate of an open-loop sweep; a closed-loop workload's runs are told "
                         "apart by concurrency, not rate: remove it"),
            std::string::npos)
      << gate[0];
}

const char* kSessions =
    "seed: 9\n"
    "backend: {kind: sim}\n"
    "strategies: [{batching: continuous}]\n"
    "workload:\n"
    "  arrival: {process: poisson, rate: 2}\n"
    "  n_requests: 12\n"
    "  sessions: {turns: 3, think_time_s: 0.5}\n"
    "  shared_prefix_tokens: 4\n"
    "  prompt_tokens: {dist: uniform, min: 5, max: 9}\n"
    "  output_tokens: 6\n";

TEST(Sessions, PlanHasConsecutiveTurnsOfEachSession) {
  const Plan plan = make_plan(load_yaml(kSessions), 2);
  ASSERT_EQ(plan.requests.size(), 12u);
  EXPECT_EQ(plan.n_sessions, 4);
  EXPECT_TRUE(same_plan(plan, make_plan(load_yaml(kSessions), 2)));
  for (size_t i = 0; i < plan.requests.size(); ++i) {
    const PlannedRequest& r = plan.requests[i];
    EXPECT_EQ(r.session, static_cast<int>(i / 3));
    EXPECT_EQ(r.turn, static_cast<int>(i % 3));
    EXPECT_EQ(r.think_time_s, r.turn == 0 ? 0.0 : 0.5);
    // Only a session's first turn carries the shared prefix; later turns get it with the history.
    if (r.turn == 0) {
      EXPECT_GE(r.prompt.size(), 4u + 5u);
      EXPECT_TRUE(std::equal(r.prompt.begin(), r.prompt.begin() + 4, plan.requests[0].prompt.begin()));
    } else {
      EXPECT_LE(r.prompt.size(), 9u);
      EXPECT_GE(r.prompt.size(), 5u);
    }
  }
}

TEST(Sessions, EachTurnCarriesThePreviousTurnsAndWaitsTheThinkTime) {
  SessionSource src(make_plan(load_yaml(kSessions), 2));
  const Plan& plan = src.plan();
  ASSERT_EQ(src.next_time(), plan.requests[0].intended_s);
  const Request t0 = src.take();
  EXPECT_EQ(t0.prompt, plan.requests[0].prompt);
  // Turn 1 is not due until turn 0's reply is in.
  while (src.next_time() && *src.next_time() < 100) {
    const Request other = src.take();
    EXPECT_EQ(plan.requests[other.id].turn, 0);
  }
  FinishedRequest f;
  f.request_id = 0;
  f.reason = FinishReason::length;
  f.outputs = {{101, 102, 103, 104, 105, 106}};
  src.on_finished(f, 7.25);
  ASSERT_EQ(src.next_time(), 7.75);
  const Request t1 = src.take();
  EXPECT_EQ(t1.id, 1u);
  std::vector<TokenId> expect = plan.requests[0].prompt;
  expect.insert(expect.end(), f.outputs[0].begin(), f.outputs[0].end());
  expect.insert(expect.end(), plan.requests[1].prompt.begin(), plan.requests[1].prompt.end());
  EXPECT_EQ(t1.prompt, expect);
  // A failed turn ends its session.
  f.request_id = 1;
  f.reason = FinishReason::rejected;
  src.on_finished(f, 8.0);
  EXPECT_EQ(src.n_turns_skipped(), 1);
}

TEST(Sessions, RunOnTheSimEngineGrowsEachPromptByTheLastTurn) {
  SweepOptions opts;
  opts.out_dir = out_dir("sessions_run");
  const Scenario s = load_yaml(kSessions);
  const SweepOutcome out = run_sweep(s, opts);
  ASSERT_EQ(out.records.size(), 12u);
  const Plan plan = make_plan(s, 2);
  std::map<uint64_t, RequestRecord> by_id;
  for (const RequestRecord& r : out.records) by_id[r.id] = r;
  for (const auto& [id, r] : by_id) {
    const PlannedRequest& p = plan.requests[id];
    EXPECT_EQ(r.status, RecordStatus::ok);
    if (p.turn == 0) continue;
    const RequestRecord& prev = by_id.at(id - 1);
    EXPECT_EQ(r.prompt_tokens, prev.prompt_tokens + prev.output_tokens + static_cast<int>(p.prompt.size()));
    EXPECT_DOUBLE_EQ(r.arrival_s, prev.end_s + 0.5);
  }
  EXPECT_EQ(scenario_errors("strategies: [{batching: continuous}]\nworkload: {concurrency: 2, sessions: {turns: 2}}\n"),
            std::vector<std::string>{
                "scn.yaml:2:38: workload.sessions needs open-loop arrivals (sessions arrive by workload.arrival; turns "
                "follow replies)"});
}

}  // namespace
}  // namespace servelab
