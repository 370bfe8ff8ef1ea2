// Issue 12 items 3–6 in the analysis layer: E2E/ITL and percentile SLOs, unit-named rates (old
// names still read), configurable percentiles, repeats with Student-t intervals, interval-aware
// compare, the steady-state window, capacity per strategy.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analysis/capacity.h"
#include "analysis/compare.h"
#include "analysis/gates.h"
#include "analysis/json_format.h"
#include "analysis/plots.h"
#include "analysis/repeats.h"
#include "analysis/report.h"
#include "analysis/summary.h"
#include "loadgen/records/gate_metrics.h"

namespace servelab::analysis {
namespace {

/// One ok request of run `run`: arrives at `arrival`, tokens at the given times.
RequestRecord req(const std::string& run, uint64_t id, double arrival, std::vector<double> tokens) {
  RequestRecord r;
  r.run = run;
  r.id = id;
  r.arrival_s = arrival;
  r.sent_s = arrival;
  r.first_token_s = tokens.front();
  r.end_s = tokens.back();
  r.output_tokens = static_cast<int>(tokens.size());
  r.token_times_s = std::move(tokens);
  r.prompt_tokens = 10;
  return r;
}

/// A: TTFT 100, gaps 50 50 (E2E 200); B: TTFT 100, gaps 10 390 (E2E 500); C: TTFT 300, gap 20.
std::vector<RequestRecord> three() {
  return {req("r", 1, 0.0, {0.1, 0.15, 0.2}), req("r", 2, 1.0, {1.1, 1.11, 1.5}), req("r", 3, 2.0, {2.3, 2.32})};
}

TEST(SloCombinations, E2eAndItlThresholdsPerRequest) {
  SloSpec slo;
  slo.ttft_ms = HUGE_VAL;  // no TTFT bound
  slo.tpot_ms = HUGE_VAL;
  slo.e2e_ms = 400;  // B misses (500)
  RunMetrics m = compute_metrics("r", three(), {}, slo);
  EXPECT_EQ(m.n_slo_met, 2u);
  slo.e2e_ms = HUGE_VAL;
  slo.itl_ms = 100;  // B's 390 ms gap misses, though its TPOT (200) is not the point here
  m = compute_metrics("r", three(), {}, slo);
  EXPECT_EQ(m.n_slo_met, 2u);
  slo.ttft_ms = 200;  // and C misses TTFT: only A left
  m = compute_metrics("r", three(), {}, slo);
  EXPECT_EQ(m.n_slo_met, 1u);
  EXPECT_NEAR(m.goodput, 3.0 / m.duration_s, 1e-9);  // A's 3 tokens over the window
  EXPECT_NE(slo.describe().find("TTFT <= 200 ms and ITL <= 100 ms per request"), std::string::npos) << slo.describe();
}

TEST(SloCombinations, PercentileObjectivesJudgeTheRun) {
  SloSpec slo;
  slo.percentiles = {{SloMetric::ttft, 50, 150}, {SloMetric::e2e, 99, 400}};
  const RunMetrics m = compute_metrics("r", three(), {}, slo);
  ASSERT_EQ(m.slo_percentiles.size(), 2u);
  EXPECT_NEAR(m.slo_percentiles[0].value_ms, 100, 1e-6);  // TTFT p50 of 100, 100, 300
  EXPECT_TRUE(m.slo_percentiles[0].met);
  EXPECT_GT(m.slo_percentiles[1].value_ms, 400);  // E2E p99 near 500
  EXPECT_FALSE(m.slo_percentiles[1].met);
  EXPECT_FALSE(m.meets_slo(slo));
  EXPECT_EQ(slo.percentiles[1].name(), "E2E p99 <= 400 ms");
  // In JSON, and back.
  const nlohmann::ordered_json j = m;
  ASSERT_TRUE(j.contains("slo_percentiles"));
  EXPECT_EQ(j["slo_percentiles"][1]["met"], false);
  EXPECT_EQ(j.get<RunMetrics>().slo_percentiles.size(), 2u);
  SloSpec bad = slo;
  bad.percentiles[0].percentile = 0;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

TEST(SloCombinations, SloJsonKeepsUnboundedAndReadsOldForm) {
  SloSpec slo;
  slo.e2e_ms = 5000;
  slo.percentiles = {{SloMetric::itl, 99.9, 80}};
  const nlohmann::ordered_json j = slo;
  EXPECT_TRUE(j["itl_ms"].is_null());  // no bound
  const SloSpec back = j.get<SloSpec>();
  EXPECT_TRUE(std::isinf(back.itl_ms));
  EXPECT_EQ(back.e2e_ms, 5000);
  ASSERT_EQ(back.percentiles.size(), 1u);
  EXPECT_EQ(back.percentiles[0].metric, SloMetric::itl);
  const SloSpec old = nlohmann::ordered_json{{"ttft_ms", 300}, {"tpot_ms", 40}, {"attainment", 0.9}}.get<SloSpec>();
  EXPECT_EQ(old.ttft_ms, 300);
  EXPECT_TRUE(std::isinf(old.e2e_ms));
}

TEST(UnitNames, WrittenWithUnitsAndOldNamesStillRead) {
  const RunMetrics m = compute_metrics("r", three(), {}, SloSpec{});
  nlohmann::ordered_json j = m;
  EXPECT_TRUE(j.contains("goodput_tok_s"));
  EXPECT_TRUE(j.contains("request_goodput_rps"));
  EXPECT_FALSE(j.contains("goodput"));
  // A summary written before units: the old keys.
  for (const auto& [nw, old] : {std::pair{"goodput_tok_s", "goodput"}, std::pair{"request_goodput_rps", "request_goodput"},
                                std::pair{"output_throughput_tok_s", "output_throughput"}}) {
    j[old] = j[nw];
    j.erase(nw);
  }
  const RunMetrics back = j.get<RunMetrics>();
  EXPECT_DOUBLE_EQ(back.goodput, round6(m.goodput));
  EXPECT_DOUBLE_EQ(back.output_throughput, round6(m.output_throughput));
  // Old metric names stay valid for gates and compare, mapped to the unit names.
  EXPECT_EQ(canonical_metric("goodput"), "goodput_tok_s");
  EXPECT_EQ(canonical_metric("request_goodput"), "request_goodput_rps");
  RunSummary rs;
  rs.metrics = back;
  rs.metrics.n_requests = 3;
  EXPECT_DOUBLE_EQ(*run_metric(rs, "goodput"), *run_metric(rs, "goodput_tok_s"));
}

TEST(Percentiles, ConfiguredOnesAreComputedAndNamed) {
  EXPECT_EQ(percentile_key(99.9), "p999");
  EXPECT_EQ(percentile_key(99.99), "p99_99");
  EXPECT_EQ(percentile_key(75), "p75");
  EXPECT_EQ(*parse_percentile_key("p99_99"), 99.99);
  EXPECT_FALSE(parse_percentile_key("max").has_value());
  std::vector<double> xs;
  for (int i = 1; i <= 101; ++i) xs.push_back(i);
  const Distribution d = summarize(xs, {75, 99.99, 50});
  ASSERT_EQ(d.extra.size(), 2u);  // 50 is a fixed one
  EXPECT_DOUBLE_EQ(d.at(75), 76);
  EXPECT_NEAR(d.at(99.99), 100.99, 1e-9);
  const nlohmann::ordered_json j = d;
  EXPECT_TRUE(j.contains("p75"));
  EXPECT_TRUE(j.contains("p99_99"));
  EXPECT_DOUBLE_EQ(j.get<Distribution>().at(75), 76);
  MetricsOptions o;
  o.percentiles = {75};
  RunSummary rs;
  rs.metrics = compute_metrics("r", three(), {}, SloSpec{}, o);
  EXPECT_TRUE(nlohmann::ordered_json(rs.metrics)["e2e_ms"].contains("p75"));
  // Gates and compare may name a configured percentile; lower is better.
  EXPECT_NO_THROW(check_metric_name("e2e_ms.p75"));
  EXPECT_EQ(metric_direction("ttft_ms.p99_99"), MetricDirection::lower_is_better);
  ASSERT_NE(find_gate_metric("e2e_p75_ms"), nullptr);  // the scenario spelling
  EXPECT_EQ(find_gate_metric("e2e_p75_ms")->path, "e2e_ms.p75");
  EXPECT_EQ(find_gate_metric("e2e_p75_0_ms")->path, "e2e_ms.p75");   // spelled as summary.json does
  EXPECT_EQ(find_gate_metric("ttft_p99_9_ms")->path, "ttft_ms.p999");
  ASSERT_TRUE(run_metric(rs, "e2e_ms.p75").has_value());
  EXPECT_DOUBLE_EQ(*run_metric(rs, "e2e_ms.p75"), round6(rs.metrics.e2e_ms.at(75)));
  EXPECT_THROW(check_metric_name("e2e_ms.p101"), std::invalid_argument);
  EXPECT_THROW(check_metric_name("e2e_ms.pxx"), std::invalid_argument);
}

TEST(Statistics, StudentTIntervalByHand) {
  EXPECT_NEAR(student_t_975(1), 12.7062, 1e-4);
  EXPECT_NEAR(student_t_975(2), 4.3027, 1e-4);
  EXPECT_NEAR(student_t_975(1000), 1.9623, 1e-4);
  const MetricStats s = stats_of({10, 12, 14, NAN});  // NaN: a repetition without a value
  EXPECT_EQ(s.n, 3u);
  EXPECT_DOUBLE_EQ(s.mean, 12);
  EXPECT_DOUBLE_EQ(s.std, 2);
  EXPECT_DOUBLE_EQ(s.min, 10);
  EXPECT_NEAR(s.ci95_hi - s.mean, 4.3027 * 2 / std::sqrt(3.0), 1e-3);
  const MetricStats one = stats_of({5});
  EXPECT_TRUE(std::isnan(one.std));
  EXPECT_TRUE(std::isnan(one.ci95_lo));
}

/// A continuous-paged point at 1 req/s repeated 3 times (seeds 1, 2, 3).
RunInfo repeated_info(const std::string& label) {
  RunInfo info;
  info.label = label;
  info.batching = "continuous";
  info.kv = "paged";
  info.rate = 1;
  info.repeats = 3;
  info.seeds = {1, 2, 3};
  return info;
}

/// A point "p@1" repeated 3 times, repetition k's TTFT = scale·(100 + 10·k) ms (one token, no TPOT).
Summary repeated(double ttft_scale, const std::string& label = "p@1") {
  const RunInfo info = repeated_info(label);
  std::vector<RequestRecord> recs;
  for (int k = 1; k <= 3; ++k)
    for (int i = 0; i < 4; ++i)
      recs.push_back(req(repetition_label(label, k, 3), static_cast<uint64_t>(i), i,
                         {i + (0.1 + 0.01 * k) * ttft_scale}));
  return build_summary({}, {}, SloSpec{}, {info}, recs, {});
}

TEST(Statistics, RepeatsGiveMeanAndIntervalPerHeadlineMetric) {
  const Summary s = repeated(1.0);
  ASSERT_EQ(s.runs.size(), 1u);  // the repetitions fold into their point
  const RunSummary& r = s.runs[0];
  ASSERT_EQ(r.repetitions.size(), 3u);
  EXPECT_NEAR(r.metrics.ttft_ms.p50, 120, 1e-6);  // mean of 110, 120, 130
  EXPECT_EQ(r.metrics.n_requests, 12u);           // counts add up
  const MetricStats* st = r.stat("ttft_ms.p50");
  ASSERT_NE(st, nullptr);
  EXPECT_NEAR(st->std, 10, 1e-6);
  EXPECT_NEAR(st->ci95_lo, 120 - 4.3027 * 10 / std::sqrt(3.0), 1e-3);
  ASSERT_NE(r.stat("goodput_tok_s"), nullptr);
  // Written and read back with the repetitions' labels and seeds.
  const auto j = nlohmann::ordered_json::parse(summary_text(s));
  EXPECT_EQ(j["runs"][0]["repeats"]["labels"][2], "p@1#3");
  EXPECT_EQ(j["runs"][0]["repeats"]["seeds"].size(), 3u);
  const Summary back = j.get<Summary>();
  EXPECT_EQ(back.runs[0].info.repeats, 3);
  ASSERT_NE(back.runs[0].stat("ttft_ms.p50"), nullptr);
  EXPECT_NEAR(back.runs[0].stat("ttft_ms.p50")->ci95_hi, st->ci95_hi, 1e-6);
}

TEST(Statistics, ARepeatedPointsAdaptersAreEachTheMeanOfTheirRepetitions) {
  // The same 4 requests a repetition, requests 0 and 1 on "sql", 2 and 3 on the base model:
  // each adapter's TTFT p50 the mean over the repetitions (as the point's), counts summed.
  const RunInfo info = repeated_info("p@1");
  std::vector<RequestRecord> recs;
  for (int k = 1; k <= 3; ++k)
    for (int i = 0; i < 4; ++i) {
      // sql's TTFT 100 + 10k ms, the base's 200 + 10k.
      recs.push_back(req(repetition_label("p@1", k, 3), static_cast<uint64_t>(i), i, {i + (i < 2 ? 0.1 : 0.2) + 0.01 * k}));
      if (i < 2) recs.back().lora = "sql";
    }
  const Summary s = build_summary({}, {}, SloSpec{}, {info}, recs, {});
  ASSERT_EQ(s.runs.size(), 1u);
  const auto& by = s.runs[0].by_lora;
  ASSERT_EQ(by.size(), 2u);  // "" (the base model) and sql
  EXPECT_EQ(by[0].first, "");
  EXPECT_EQ(by[1].first, "sql");
  EXPECT_EQ(by[1].second.n_requests, 6u);
  EXPECT_NEAR(by[1].second.ttft_ms.p50, 120, 1e-6);  // mean of 110, 120, 130
  EXPECT_NEAR(by[0].second.ttft_ms.p50, 220, 1e-6);
  // report.md's per-adapter table: one row each, the base model as "(base)"; with a cap of one
  // adapter a run, a row counts the rest.
  const std::string md = report_markdown(s, {}, {}, {});
  EXPECT_NE(md.find("## Multi-LoRA, per adapter"), std::string::npos) << md;
  EXPECT_NE(md.find("| continuous-paged | 1 | sql | 6 | 0 | 120.0 | 120.0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| (base) | 6 |"), std::string::npos) << md;
  const TextRows capped = lora_table(s, 1);
  ASSERT_EQ(capped.rows.size(), 2u);
  EXPECT_EQ(capped.rows[1][2], "1 more adapters (summary.json)");
  EXPECT_EQ(capped.rows[1][3], "6");
  EXPECT_TRUE(lora_table(repeated(1.0)).empty());  // no adapters: no table
}

TEST(Statistics, CompareFlagsOnlyWhenIntervalsDoNotOverlap) {
  const Summary base = repeated(1.0);
  // 30% worse TTFT, but with repetitions spread ±10 ms the intervals ([95, 145] and [124, 188]) overlap: noise.
  Comparison c = compare_summaries(base, repeated(1.3), 10.0, {"ttft_ms.p50"});
  ASSERT_EQ(c.runs.size(), 1u);
  EXPECT_TRUE(c.runs[0].deltas[0].intervals);
  EXPECT_FALSE(c.runs[0].deltas[0].regression);
  EXPECT_TRUE(c.runs[0].deltas[0].within_noise);
  std::ostringstream out;
  print_comparison(out, c);
  EXPECT_NE(out.str().find("within noise"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("intervals must not overlap"), std::string::npos) << out.str();
  // 5× worse: the intervals separate, so it is a regression.
  c = compare_summaries(base, repeated(5.0), 10.0, {"ttft_ms.p50"});
  EXPECT_TRUE(c.runs[0].deltas[0].regression);
  EXPECT_EQ(c.exit_code(), 1);
  // Below the threshold nothing is flagged, intervals or not.
  c = compare_summaries(base, repeated(1.05), 10.0, {"ttft_ms.p50"});
  EXPECT_FALSE(c.runs[0].deltas[0].regression);
  EXPECT_FALSE(c.runs[0].deltas[0].within_noise);
}

TEST(Window, DropsFirstAndLastRequestsFromEveryMetric) {
  std::vector<RequestRecord> v;
  for (int i = 0; i < 10; ++i) v.push_back(req("r", static_cast<uint64_t>(i), i, {i + (i == 0 || i == 9 ? 5.0 : 0.1)}));
  MetricsOptions o;
  o.window.skip_first_requests = 1;
  o.window.skip_last_requests = 1;
  const RunMetrics m = compute_metrics("r", v, {}, SloSpec{}, o);
  EXPECT_EQ(m.n_requests, 8u);
  EXPECT_EQ(m.n_window_dropped, 2u);
  EXPECT_NEAR(m.ttft_ms.max, 100, 1e-6);  // the slow first and last are gone
  EXPECT_NEAR(m.window_start_s, 1.0, 1e-12);
  EXPECT_NEAR(m.duration_s, 8.1 - 1.0, 1e-9);
  EXPECT_NEAR(m.request_throughput, 8 / 7.1, 1e-9);
  EXPECT_EQ(latency_samples("r", v, o.window).ttft_ms.size(), 8u);  // the CDF plots see the same set
}

TEST(Window, BySecondsOfArrivalsAndDescribed) {
  std::vector<RequestRecord> v;
  for (int i = 0; i < 10; ++i) v.push_back(req("r", static_cast<uint64_t>(i), i, {i + 0.1}));
  MetricsOptions o;
  o.window.skip_first_s = 2.5;  // drops arrivals 0, 1, 2
  o.window.skip_last_s = 0.5;   // drops arrival 9 (> 9 − 0.5)
  const RunMetrics m = compute_metrics("r", v, {}, SloSpec{}, o);
  EXPECT_EQ(m.n_requests, 6u);
  EXPECT_EQ(m.n_window_dropped, 4u);
  EXPECT_NE(o.window.describe().find("first 2.5 s"), std::string::npos);
  WindowSpec both;
  both.skip_first_s = 1;
  both.skip_last_requests = 1;
  EXPECT_THROW(both.validate(), std::invalid_argument);
  // The summary says which window every run used.
  const Summary s = build_summary({}, {}, SloSpec{}, {}, v, {}, o);
  const auto j = nlohmann::ordered_json::parse(summary_text(s));
  EXPECT_EQ(j["report"]["window"]["skip_first_s"], 2.5);
  EXPECT_NE(j["report"]["window"]["description"].get<std::string>().find("dropping"), std::string::npos);
}

TEST(Capacity, HighestRateMeetingTheSloPerStrategy) {
  Summary s;
  for (double rate : {1.0, 2.0, 4.0}) {
    RunSummary r;
    r.info.label = "a@" + std::to_string(rate);
    r.info.strategy = "a";
    r.info.rate = rate;
    r.metrics.n_requests = 10;
    r.metrics.slo_attainment = rate < 3 ? 0.95 : 0.5;
    s.runs.push_back(r);
  }
  const auto caps = strategy_capacities(s);
  ASSERT_EQ(caps.size(), 1u);
  EXPECT_EQ(caps[0].second, 2.0);
  s.slo.percentiles = {{SloMetric::ttft, 99, 10}};
  s.runs[1].metrics.slo_percentiles = {{s.slo.percentiles[0], 50.0, false}};  // 2 req/s misses its p99
  EXPECT_EQ(strategy_capacities(s)[0].second, 1.0);
}

TEST(Capacity, BisectionHonoursPercentileObjectives) {
  // Attainment always 100%, but the run's TTFT p99 objective fails above 30 req/s.
  auto curve = [](double rate) {
    RunMetrics m;
    m.slo_attainment = 1.0;
    m.slo_percentiles = {{{SloMetric::ttft, 99, 2000}, rate * 60.0, rate * 60.0 <= 2000}};
    return probe_from_metrics(rate, m, 0.0);
  };
  BisectionOptions o;
  o.rate_lo = 1.0;
  o.precision = 0.1;
  o.precision_pct = 0.0;
  const StrategyCapacity c = find_capacity("s", curve, o);
  ASSERT_TRUE(c.found) << c.note;
  EXPECT_NEAR(c.capacity, 2000.0 / 60.0, 0.1);
}

}  // namespace
}  // namespace servelab::analysis

namespace servelab::analysis {
namespace {

TEST(Reports, SayWindowRepeatsPercentilesAndObjectives) {
  Summary s = repeated(1.0);
  s.options.percentiles = {75};
  s.options.window.skip_first_requests = 1;
  s.slo.percentiles = {{SloMetric::ttft, 99, 1000}};
  for (auto& r : s.runs) r.metrics.slo_percentiles = {{s.slo.percentiles[0], 130.0, true}};
  const std::string md = report_markdown(s, {}, {}, {});
  EXPECT_NE(md.find("## Repeats"), std::string::npos) << md;
  EXPECT_NE(md.find(" ± 24.8"), std::string::npos) << md;  // TTFT p50: half-width 4.303 · 10 / √3
  EXPECT_NE(md.find("## Latency percentiles"), std::string::npos) << md;
  EXPECT_NE(md.find("TTFT p75 (ms)"), std::string::npos) << md;
  EXPECT_NE(md.find("TTFT p99 <= 1000 ms"), std::string::npos) << md;
  EXPECT_NE(md.find("measurement window: dropping the first 1 and last 0 measured requests"), std::string::npos) << md;
  EXPECT_NE(md.find("each point run 3 times"), std::string::npos) << md;
  EXPECT_NE(md.find("capacity (highest rate meeting the SLO): continuous-paged 1 req/s"), std::string::npos) << md;
  EXPECT_NE(results_csv(s).find("request_goodput_rps"), std::string::npos);
}

}  // namespace
}  // namespace servelab::analysis
