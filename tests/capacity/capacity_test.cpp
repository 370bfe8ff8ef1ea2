// Capacity search: bisection against known capacities (a synthetic attainment curve, and a sim
// whose cost model is exact so the capacity can be worked out by hand), deployment arithmetic,
// reproducibility, and the scenario's capacity: section.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "analysis/capacity.h"
#include "analysis/metrics.h"
#include "engine/backend/cost_model.h"
#include "loadgen/capacity_probe.h"
#include "loadgen/records/record.h"
#include "loadgen/scenario.h"

namespace servelab {
namespace {

using analysis::BisectionOptions;
using analysis::CapacityProbe;

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("servelab_capacity_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

TEST(FindCapacity, BisectsASyntheticCurveToThePrecision) {
  // Attainment falls linearly from 100% at 40 req/s to 0 at 60: the 90% line is at 42.
  auto curve = [](double rate) {
    CapacityProbe p;
    p.slo_attainment = std::clamp(1.0 - (rate - 40.0) / 20.0, 0.0, 1.0);
    p.output_throughput = 100.0 * rate;
    p.request_throughput = rate;
    return p;
  };
  BisectionOptions o;
  o.rate_lo = 1.0;
  o.precision = 0.01;
  o.precision_pct = 0.0;
  const analysis::StrategyCapacity c = analysis::find_capacity("s", curve, o);
  ASSERT_TRUE(c.found) << c.note;
  EXPECT_LE(c.capacity, 42.0);
  EXPECT_GT(c.failing_rate, 42.0);
  EXPECT_LE(c.failing_rate - c.capacity, 0.01);
  EXPECT_NEAR(c.capacity, 42.0, 0.01);
  // Doubling 1, 2, ..., 64 brackets it; every probe is kept, in order.
  ASSERT_GE(c.probes.size(), 8u);
  EXPECT_EQ(c.probes[0].rate, 1.0);
  EXPECT_EQ(c.probes[6].rate, 64.0);
  EXPECT_FALSE(c.probes[6].meets);
  for (const CapacityProbe& p : c.probes) EXPECT_EQ(p.meets, p.slo_attainment >= 0.9);

  // Starting above it: halving finds a meeting rate first.
  o.rate_lo = 500.0;
  const analysis::StrategyCapacity d = analysis::find_capacity("s", curve, o);
  EXPECT_NEAR(d.capacity, 42.0, 0.01);
  // Nothing meets: said so, no capacity.
  const analysis::StrategyCapacity none = analysis::find_capacity("s", [](double) { return CapacityProbe{}; }, o);
  EXPECT_FALSE(none.found);
  EXPECT_NE(none.note.find("below the lowest probe"), std::string::npos);
}

TEST(PlanDeployment, ReplicasGpusAndCost) {
  analysis::StrategyCapacity c;
  c.found = true;
  c.capacity = 30.0;
  c.at_capacity.request_throughput = 29.5;
  c.at_capacity.output_throughput = 9000.0;
  analysis::plan_deployment(c, 400.0, 2, 2.5);
  EXPECT_EQ(c.replicas, 14);  // ceil(400 / 30)
  EXPECT_EQ(c.gpus, 28);
  EXPECT_DOUBLE_EQ(c.fleet_usd_per_hour, 70.0);
  // One replica costs $5/hour and makes 9000 × 3600 = 32.4M output tokens an hour.
  EXPECT_NEAR(c.usd_per_m_output_tokens, 5.0 / 32.4, 1e-12);
  EXPECT_NEAR(c.requests_per_usd, 29.5 * 3600 / 5.0, 1e-9);
  analysis::plan_deployment(c, 60.0, 1, 0.0);
  EXPECT_EQ(c.replicas, 2);  // exactly 2 × 30: no third replica
  EXPECT_EQ(c.usd_per_m_output_tokens, 0.0);
}

/// A profile of `tiny` in which every step takes exactly 10 ms, over the shapes the scenario
/// below produces (16-token prefills, decodes at contexts 17..26), so the sim prices every step
/// from the profile and the capacity follows by hand.
std::string constant_profile() {
  const ModelConfig m = preset("tiny");
  nlohmann::json j;
  j["schema"] = "servelab.profile/2";
  j["backend"] = "cpu";
  j["hardware"] = "cpu-2core";
  j["model"] = {{"name", m.name}, {"hidden_size", m.hidden_size}, {"n_layers", m.n_layers}, {"n_heads", m.n_heads},
                {"n_kv_heads", m.n_kv_heads}, {"head_dim", m.head_dim()}, {"intermediate_size", m.intermediate_size},
                {"vocab_size", m.vocab_size}};
  auto sample = [](int tokens, int context, double pairs, double decode) {
    return nlohmann::json{{"n_seqs", 1},          {"n_tokens", tokens},     {"n_sampled", 1},
                          {"sum_context", context}, {"max_context", context}, {"prefill_pairs", pairs},
                          {"decode_context", decode}, {"step_s", 0.010}};
  };
  j["samples"] = {sample(16, 16, 136, 0), sample(1, 17, 0, 17), sample(1, 40, 0, 40)};
  const std::string path = temp_path("constant_profile.json");
  std::ofstream(path) << j.dump();
  return path;
}

Scenario exact_sim_scenario() {
  const std::string yaml =
      "model: {preset: tiny}\n"
      "backend: {kind: sim, sim_profile: " + constant_profile() + "}\n"
      "engine: {kv_cache_mb: 4, max_model_len: 64}\n"
      "strategies: [{label: one-at-a-time, batching: static, batch_size: 1, max_wait_ms: 0, kv: {kind: paged}}]\n"
      "workload: {arrival: {process: constant}, rates: [1], n_requests: 200, prompt_tokens: 16, output_tokens: 10}\n"
      "slo: {ttft_ms: 15, tpot_ms: 1000, attainment: 0.9}\n"
      "capacity: {rate_lo: 1, precision: 0.01, precision_pct: 0}\n";
  return load_scenario_text(yaml, temp_path("exact.yaml"));
}

CapacityProbe probe_point(const PointRunner& runner, const Scenario& sc, double rate) {
  const PointRun run = runner.run(0, rate);
  EXPECT_TRUE(run.cost_counts.has_value());
  EXPECT_EQ(run.cost_counts->profile, run.cost_counts->total()) << "every step inside the profiled grid";
  analysis::SloSpec slo{sc.slo.ttft_ms, sc.slo.tpot_ms, sc.slo.attainment};
  return analysis::probe_from_metrics(rate, analysis::compute_metrics(run.label, run.records, {}, slo), run.wall_s);
}

TEST(FindCapacity, FindsTheKnownCapacityOfASimWithAnExactCostModel) {
  // One request at a time, each 1 prefill + 9 decode steps of 10 ms = 100 ms: 10 req/s. Below it
  // every TTFT is the 10 ms prefill (SLO 15 ms); above it, with constant arrivals, request i waits
  // i·(0.1 − 1/rate) more, so within a few requests TTFT passes 15 ms and attainment collapses.
  const Scenario sc = exact_sim_scenario();
  const PointRunner runner(sc);
  const CapacityProbe below = probe_point(runner, sc, 9.9);
  EXPECT_DOUBLE_EQ(below.slo_attainment, 1.0);
  EXPECT_NEAR(below.ttft_p99_ms, 10.0, 1e-6);
  EXPECT_NEAR(below.tpot_p50_ms, 10.0, 1e-6);
  EXPECT_LT(probe_point(runner, sc, 10.2).slo_attainment, 0.1);

  BisectionOptions o;
  o.target = sc.slo.attainment;
  o.rate_lo = sc.capacity->rate_lo;
  o.precision = sc.capacity->precision;
  o.precision_pct = sc.capacity->precision_pct;
  const analysis::StrategyCapacity c =
      analysis::find_capacity("one-at-a-time", [&](double r) { return probe_point(runner, sc, r); }, o);
  ASSERT_TRUE(c.found);
  EXPECT_LE(c.capacity, 10.0 + 1e-9);
  EXPECT_GE(c.capacity, 10.0 - 0.01);
  EXPECT_LE(c.failing_rate - c.capacity, 0.01);
}

// workload.repeat: a probe of several runs is scored on their mean; each run's attainment and
// their spread are kept; one run is probe_from_metrics's probe; none is an error.
TEST(ProbeFromRuns, MeanOfTheRunsWithTheirSpread) {
  std::vector<analysis::RunMetrics> runs(3);
  const double att[] = {1.0, 0.8, 0.6};
  for (int k = 0; k < 3; ++k) {
    runs[k].slo_attainment = att[k];
    runs[k].n_requests = 100;
    runs[k].output_throughput = 1000.0 * (k + 1);
    runs[k].ttft_ms.p99 = 10.0 * (k + 1);
  }
  const CapacityProbe p = analysis::probe_from_runs(4.0, runs, 1.5);
  EXPECT_EQ(p.repeats, 3);
  EXPECT_DOUBLE_EQ(p.rate, 4.0);
  EXPECT_NEAR(p.slo_attainment, 0.8, 1e-12);
  EXPECT_NEAR(p.output_throughput, 2000.0, 1e-9);
  EXPECT_NEAR(p.ttft_p99_ms, 20.0, 1e-9);
  EXPECT_EQ(p.n_requests, 300);  // counts summed
  EXPECT_EQ(p.attainment_runs, (std::vector<double>{1.0, 0.8, 0.6}));
  EXPECT_EQ(p.attainment_stats.n, 3u);
  EXPECT_DOUBLE_EQ(p.attainment_stats.min, 0.6);
  EXPECT_DOUBLE_EQ(p.attainment_stats.max, 1.0);
  EXPECT_NEAR(p.attainment_stats.std, 0.2, 1e-12);
  EXPECT_LT(p.attainment_stats.ci95_lo, 0.8);
  EXPECT_GT(p.attainment_stats.ci95_hi, 0.8);
  EXPECT_DOUBLE_EQ(p.wall_s, 1.5);

  const CapacityProbe one = analysis::probe_from_runs(4.0, {runs[1]}, 0.5);
  EXPECT_EQ(one.repeats, 1);
  EXPECT_DOUBLE_EQ(one.slo_attainment, 0.8);
  EXPECT_TRUE(one.attainment_runs.empty());
  EXPECT_THROW(analysis::probe_from_runs(4.0, {}, 0.0), std::invalid_argument);

  // The table shows the runs and their range only when some probe repeated.
  analysis::StrategyCapacity c;
  c.strategy = "s";
  c.probes = {p};
  EXPECT_NE(analysis::capacity_table({c}, 0.9).find("60.0-100.0%"), std::string::npos);
  c.probes = {one};
  EXPECT_EQ(analysis::capacity_table({c}, 0.9).find("attain_range"), std::string::npos);
}

// validate-sim's "sensitivity": the sim rerun with every step 2% cheaper and dearer, (f(1.02) −
// f(0.98)) / (0.04 · f(1)). On the exact sim it is known by hand: at half its capacity each request
// runs alone, every TTFT and TPOT is a step time, so both move exactly with the steps
// (elasticity 1); at 99% load a 2% dearer step is past capacity (102 ms a request against 101 ms
// between arrivals), the queue grows with every request and TTFT p99 moves many times more.
// (ValidateSimCommand's CLI test runs it on a measured profile, where only its finiteness is fixed.)
TEST(PointRunner, SimCostScaleSensitivityIsOneAloneAndGrowsNearCapacity) {
  const Scenario sc = exact_sim_scenario();
  auto metrics_at = [&](double scale, double rate) {
    Scenario s = sc;
    s.backend.sim_cost_scale = scale;
    const PointRun run = PointRunner(s).run(0, rate);
    return analysis::compute_metrics(run.label, run.records, {}, analysis::SloSpec{});
  };
  auto elasticity = [](double lo, double mid, double hi) { return (hi - lo) / (0.04 * mid); };
  const analysis::RunMetrics lo = metrics_at(0.98, 5), mid = metrics_at(1.0, 5), hi = metrics_at(1.02, 5);
  EXPECT_NEAR(mid.tpot_ms.p50, 10.0, 1e-9);
  EXPECT_NEAR(elasticity(lo.tpot_ms.p50, mid.tpot_ms.p50, hi.tpot_ms.p50), 1.0, 1e-9);
  EXPECT_NEAR(elasticity(lo.ttft_ms.p99, mid.ttft_ms.p99, hi.ttft_ms.p99), 1.0, 1e-9);
  const analysis::RunMetrics lo99 = metrics_at(0.98, 9.9), mid99 = metrics_at(1.0, 9.9), hi99 = metrics_at(1.02, 9.9);
  EXPECT_NEAR(elasticity(lo99.tpot_ms.p50, mid99.tpot_ms.p50, hi99.tpot_ms.p50), 1.0, 1e-9);
  EXPECT_GT(elasticity(lo99.ttft_ms.p99, mid99.ttft_ms.p99, hi99.ttft_ms.p99), 10.0);
}

TEST(PointRunner, SameSeedGivesByteIdenticalRecordsAndCapacitySummary) {
  const Scenario sc = exact_sim_scenario();
  auto summary = [&] {
    const PointRunner runner(sc);
    PointRunOptions keep;
    keep.keep_token_times = true;
    std::string lines;
    for (const RequestRecord& r : runner.run(0, 9.5, keep).records) lines += record_line(r);
    BisectionOptions o;
    o.rate_lo = 4;
    o.precision_pct = 1;
    auto c = analysis::find_capacity("s", [&](double r) {
      CapacityProbe p = probe_point(runner, sc, r);
      p.wall_s = 0;  // the one figure that is not simulated
      return p;
    }, o);
    return lines + analysis::capacity_json({c}, 0.9, {}).dump(2);
  };
  const std::string a = summary(), b = summary();
  EXPECT_GT(a.size(), 1000u);
  EXPECT_EQ(a, b);
}

TEST(CapacityConfig, ParsesTheSectionAndReportsBadValuesWhereTheyAre) {
  const std::string base =
      "strategies: [{batching: continuous, kv: {kind: paged}}]\n"
      "workload: {rates: [1], n_requests: 10, prompt_tokens: 8, output_tokens: 8}\n";
  const Scenario s = load_scenario_text(
      base + "capacity: {rate_lo: 2, rate_hi: 64, precision: 0.5, target_rate: 400, gpu_hour_usd: 2.5,\n"
             "           tensor_parallel: 2, gpu_memory_utilization: 0.9, n_requests: 1000}\n",
      "c.yaml");
  ASSERT_TRUE(s.capacity.has_value());
  EXPECT_EQ(s.capacity->rate_lo, 2.0);
  EXPECT_EQ(s.capacity->rate_hi, 64.0);
  EXPECT_EQ(s.capacity->tensor_parallel, 2);
  EXPECT_EQ(s.capacity->n_requests, 1000);
  EXPECT_EQ(s.capacity->gpu_memory_utilization, 0.9);
  EXPECT_FALSE(load_scenario_text(base, "c.yaml").capacity.has_value());
  try {
    load_scenario_text(base + "capacity:\n  gpu_memory_utilization: 1.5\n  rate_hi: 1\n  rate_lo: 3\n  bogus: 1\n", "c.yaml");
    FAIL() << "expected errors";
  } catch (const ScenarioError& e) {
    std::string all;
    for (const auto& m : e.messages) all += m + "\n";
    EXPECT_NE(all.find("c.yaml:4:27: capacity.gpu_memory_utilization must be in (0, 1] (got 1.5)"), std::string::npos) << all;
    EXPECT_NE(all.find("capacity.rate_hi must be above capacity.rate_lo"), std::string::npos) << all;
    EXPECT_NE(all.find("unknown key 'bogus' in capacity"), std::string::npos) << all;
  }
}

// capacity.decide: ci95_lo needs repeated probes; bad values are named where they are.
TEST(CapacityConfig, DecideOnTheIntervalNeedsRepeats) {
  const std::string base =
      "strategies: [{batching: continuous, kv: {kind: paged}}]\n"
      "workload: {rates: [1], n_requests: 10, prompt_tokens: 8, output_tokens: 8, repeat: 3}\n";
  EXPECT_EQ(load_scenario_text(base + "capacity: {decide: ci95_lo}\n", "c.yaml").capacity->decide, CapacityDecide::ci95_lo);
  EXPECT_EQ(load_scenario_text(base + "capacity: {rate_lo: 2}\n", "c.yaml").capacity->decide, CapacityDecide::mean);
  const auto errors = [&](const std::string& text) {
    try {
      load_scenario_text(text, "c.yaml");
    } catch (const ScenarioError& e) {
      std::string all;
      for (const auto& m : e.messages) all += m + "\n";
      return all;
    }
    return std::string();
  };
  std::string all = errors(base + "capacity: {decide: lower}\n");
  EXPECT_NE(all.find("c.yaml:3:20: capacity.decide must be one of mean, ci95_lo (got 'lower')"), std::string::npos) << all;
  std::string one = base;
  one.replace(one.find("repeat: 3"), 9, "repeat: 1");
  all = errors(one + "capacity: {decide: ci95_lo}\n");
  EXPECT_NE(all.find("capacity.decide ci95_lo needs workload.repeat >= 2"), std::string::npos) << all;
}

// decide_on_ci95_lo: a repeated probe meets only when the lower end of its interval does; a probe
// of one run is judged on its attainment.
TEST(FindCapacity, DecidingOnTheIntervalIsMoreCautious) {
  // Mean attainment falls from 100% at 40 req/s to 0 at 60; the runs spread +-4 points around it.
  auto probe = [](double rate) {
    const double mean = std::clamp(1.0 - (rate - 40.0) / 20.0, 0.0, 1.0);
    std::vector<analysis::RunMetrics> runs(3);
    const double spread[] = {-0.04, 0.0, 0.04};
    for (int k = 0; k < 3; ++k) runs[k].slo_attainment = mean + spread[k];
    return analysis::probe_from_runs(rate, runs, 0.0);
  };
  BisectionOptions o;
  o.rate_lo = 1.0;
  o.precision = 0.01;
  o.precision_pct = 0.0;
  const analysis::StrategyCapacity on_mean = analysis::find_capacity("s", probe, o);
  o.decide_on_ci95_lo = true;
  const analysis::StrategyCapacity on_lo = analysis::find_capacity("s", probe, o);
  EXPECT_NEAR(on_mean.capacity, 42.0, 0.01);
  // ci95_lo = mean - t(0.975, 2) * 0.04 / sqrt(3) = mean - 0.0994: meets where mean >= 0.9994.
  EXPECT_NEAR(on_lo.capacity, 40.0 + 0.0006 * 20.0, 0.02);
  for (const CapacityProbe& p : on_lo.probes) EXPECT_EQ(p.meets, p.attainment_stats.ci95_lo >= 0.9) << p.rate;
}

TEST(PointRunner, SizesTheKvArenaFromGpuMemory) {
  const Scenario s = load_scenario_text(
      "model: {preset: llama2-7b}\nbackend: {kind: sim, sim_device: h100}\n"
      "strategies: [{batching: continuous, max_num_seqs: 256, max_num_batched_tokens: 4096, kv: {kind: paged}}]\n"
      "workload: {rates: [1], n_requests: 10, prompt_tokens: 8, output_tokens: 8}\n"
      "capacity: {gpu_memory_utilization: 0.9}\n",
      "k.yaml");
  const PointRunner runner(s);
  EXPECT_EQ(runner.kv_cache_bytes(0), 57102086144);  // tests/engine/sim_backend_test.cpp works it out
  EXPECT_EQ(runner.run(0, 1.0).records.size(), 10u);
}

}  // namespace
}  // namespace servelab

namespace servelab {
namespace {

TEST(FindCapacity, EveryProbeMeetingIsALowerBoundNotACapacity) {
  // A server the probes never load (every probe meets the target): no capacity is invented.
  analysis::BisectionOptions o;
  o.rate_lo = 1.0;
  o.max_probes = 4;
  const analysis::StrategyCapacity c = analysis::find_capacity(
      "s", [](double) { CapacityProbe p; p.slo_attainment = 1.0; return p; }, o);
  EXPECT_FALSE(c.found);
  EXPECT_EQ(c.capacity, 0.0);
  EXPECT_EQ(c.lower_bound, 8.0);
  EXPECT_NE(c.note.find("not bracketed: >= 8 req/s"), std::string::npos) << c.note;
  // Unbounded probes stop at kMaxProbeRate (not 4398046511104 req/s).
  o.max_probes = 1000;
  const analysis::StrategyCapacity u = analysis::find_capacity(
      "s", [](double) { CapacityProbe p; p.slo_attainment = 1.0; return p; }, o);
  EXPECT_FALSE(u.found);
  EXPECT_LE(u.lower_bound, 2 * analysis::kMaxProbeRate);
  const std::string table = analysis::capacity_table({c}, 0.9);
  EXPECT_NE(table.find("not bracketed"), std::string::npos) << table;
  const auto j = analysis::capacity_json({c}, 0.9, {});
  EXPECT_TRUE(j["strategies"][0]["capacity_rps"].is_null());
  EXPECT_EQ(j["strategies"][0]["lower_bound_rps"], 8.0);
  analysis::StrategyCapacity d = c;
  analysis::plan_deployment(d, 400.0, 1, 2.5);
  EXPECT_EQ(d.replicas, 0);
}

TEST(FindCapacity, NothingMeetingIsBelowTheLowestProbe) {
  analysis::BisectionOptions o;
  o.rate_lo = 4.0;
  o.max_probes = 3;
  const analysis::StrategyCapacity c = analysis::find_capacity("s", [](double) { return CapacityProbe{}; }, o);
  EXPECT_FALSE(c.found);
  EXPECT_NE(c.note.find("below the lowest probe: < 1 req/s"), std::string::npos) << c.note;
}

}  // namespace
}  // namespace servelab
