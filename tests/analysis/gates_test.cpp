#include "analysis/gates.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "loadgen/records/gate_metrics.h"
#include <string>
#include <vector>

namespace servelab::analysis {
namespace {

/// A summary with two hand-set runs (no records needed for gates).
Summary hand_summary() {
  Summary s;
  RunSummary a;
  a.info.label = "continuous-paged@4";
  a.info.batching = "continuous";
  a.info.kv = "paged";
  a.info.rate = 4;
  a.metrics.ttft_ms = summarize({100, 200, 300});  // p99 = 298
  a.metrics.slo_attainment = 0.95;
  a.metrics.goodput = 500;
  a.metrics.n_requests = 3;
  RunSummary b = a;
  b.info.label = "static-naive@4";
  b.info.batching = "static";
  b.info.kv = "naive";
  b.metrics.ttft_ms = summarize({900, 1000, 1100});  // p99 = 1098
  b.metrics.slo_attainment = 0.6;
  b.metrics.n_failed = 2;
  s.runs = {a, b};
  return s;
}

Gate gate(const std::string& metric, std::optional<double> min, std::optional<double> max,
          std::optional<std::string> strategy = std::nullopt) {
  Gate g;
  g.metric = metric;
  g.min = min;
  g.max = max;
  g.strategy = strategy;
  return g;
}

TEST(Gates, PassAndFailPerMatchingRun) {
  const auto res = evaluate_gates(
      hand_summary(),
      {gate("ttft_ms.p99", std::nullopt, 500, "continuous-paged"), gate("ttft_ms.p99", std::nullopt, 500),
       gate("slo_attainment", 0.5, std::nullopt), gate("n_failed", std::nullopt, 0)});
  ASSERT_EQ(res.size(), 4u);
  EXPECT_TRUE(res[0].passed) << res[0].message;
  EXPECT_FALSE(res[1].passed);  // static-naive's 1098 ms
  EXPECT_NE(res[1].message.find("static-naive @ 4: 1098 FAIL"), std::string::npos) << res[1].message;
  EXPECT_NE(res[1].message.find("continuous-paged @ 4: 298.0 ok"), std::string::npos) << res[1].message;
  EXPECT_TRUE(res[2].passed);
  EXPECT_FALSE(res[3].passed);
  EXPECT_EQ(res[0].name, "ttft_ms.p99 <= 500 [continuous-paged]");
  EXPECT_FALSE(all_passed(res));
}

TEST(Gates, NoMatchingRunOrNoValueFails) {
  Gate g = gate("goodput", 1, std::nullopt, "dynamic-paged");
  auto res = evaluate_gates(hand_summary(), {g});
  EXPECT_FALSE(res[0].passed);
  EXPECT_NE(res[0].message.find("no run matches"), std::string::npos);

  Summary s = hand_summary();
  s.runs[0].metrics.tpot_ms = summarize({});  // no samples: null, not 0
  res = evaluate_gates(s, {gate("tpot_ms.p50", std::nullopt, 100, "continuous-paged")});
  EXPECT_FALSE(res[0].passed);
  EXPECT_NE(res[0].message.find("no value"), std::string::npos);
}

// Issue 6 item 10: a gate over a run that measured nothing fails; it does not pass vacuously.
TEST(Gates, RunWithZeroRecordsFailsTheGate) {
  Summary s = hand_summary();
  s.runs[1].metrics = RunMetrics{};  // nothing measured: n_failed 0 would "pass" n_failed <= 0
  const auto res = evaluate_gates(s, {gate("n_failed", std::nullopt, 0, "static-naive")});
  EXPECT_FALSE(res[0].passed) << res[0].message;
  EXPECT_NE(res[0].message.find("no measured records"), std::string::npos) << res[0].message;
  Gate allowed = gate("n_failed", std::nullopt, 0, "static-naive");
  allowed.allow_missing = true;  // the opt-out
  EXPECT_TRUE(evaluate_gates(s, {allowed})[0].passed);
  const nlohmann::ordered_json j = allowed;  // runs.json keeps the opt-out
  EXPECT_TRUE(j.get<Gate>().allow_missing);
}

// Issue 6 item 10: the baseline gate fails when the new summary lost a run or a metric went null.
TEST(Gates, BaselineFailsOnALostRunOrANullMetric) {
  const Summary base = hand_summary();
  BaselineSpec spec;
  spec.path = "base.json";
  spec.metrics = {"goodput"};
  Summary lost = base;
  lost.runs.pop_back();
  auto res = evaluate_baseline(lost, base, spec);
  EXPECT_FALSE(res[0].passed) << res[0].message;
  EXPECT_NE(res[0].message.find("static-naive@4"), std::string::npos) << res[0].message;
  Summary null_metric = base;
  null_metric.runs[0].metrics.goodput = std::nan("");
  res = evaluate_baseline(null_metric, base, spec);
  EXPECT_FALSE(res[0].passed) << res[0].message;
  spec.allow_missing = true;  // the opt-out
  EXPECT_TRUE(evaluate_baseline(null_metric, base, spec)[0].passed);
  EXPECT_TRUE(evaluate_baseline(lost, base, spec)[0].passed);
}

// Issue 6 item 11: a gate's infinite rate (a `.inf` sweep point) and a baseline's infinite
// threshold survive runs.json: JSON has no infinity, and null would read back as "no filter".
TEST(Gates, NonFiniteNumbersRoundTripOrAreRejected) {
  Gate g = gate("ttft_ms.p99", std::nullopt, 500);
  g.rate = std::numeric_limits<double>::infinity();
  const nlohmann::ordered_json j = g;
  const Gate back = j.get<Gate>();
  ASSERT_TRUE(back.rate.has_value()) << j.dump();
  EXPECT_TRUE(std::isinf(*back.rate));
  g.rate = std::nan("");
  EXPECT_THROW(g.validate(), std::invalid_argument);
  BaselineSpec b;
  b.path = "base.json";
  b.max_regression_pct = std::numeric_limits<double>::infinity();
  const nlohmann::ordered_json bj = b;
  EXPECT_TRUE(std::isinf(bj.get<BaselineSpec>().max_regression_pct)) << bj.dump();
}

// Issue 6 item 18: one registry of gate metrics. Every entry names a value a real summary has
// (so the registry cannot drift from metrics.h's JSON), both spellings are unique, and the
// gate direction comes from it.
TEST(Gates, EveryRegistryMetricResolvesInAComputedSummary) {
  RequestRecord r;
  r.run = "x";
  r.arrival_s = 0.0;
  r.scheduled_s = 0.01;
  r.first_token_s = 0.02;
  r.token_times_s = {0.02, 0.03, 0.05};
  r.end_s = 0.05;
  r.output_tokens = 3;
  StepRecord st;
  st.run = "x";
  st.duration_s = 0.05;
  st.batch_size = 1;
  st.kv_capacity = 10;
  st.kv_stored = 3;
  st.kv_free = 7;
  RunSummary run;
  run.info.label = "x";
  run.metrics = compute_metrics("x", {r}, {st}, SloSpec{});
  // The figures kept beside "metrics": a roofline with every step class, a measured accuracy.
  run.roofline = RooflineEfficiency{};
  for (RooflineShare* c : {&run.roofline->prefill, &run.roofline->decode, &run.roofline->mixed, &run.roofline->overall})
    c->add(0.01, 0.02);
  run.info.accuracy = FormatAccuracy{};
  run.info.accuracy->weights = "fp8";
  run.info.accuracy->kv_cache_dtype = "auto";
  run.info.accuracy->positions = 16;
  std::set<std::string> paths, flat;
  for (const auto& m : servelab::gate_metrics()) {
    EXPECT_TRUE(run_metric(run, m.path).has_value()) << m.path;
    EXPECT_TRUE(paths.insert(m.path).second) << m.path;
    EXPECT_TRUE(flat.insert(m.scenario_name).second) << m.scenario_name;
    EXPECT_EQ(metric_direction(m.path) == MetricDirection::higher_is_better, m.higher_is_better) << m.path;
  }
  EXPECT_EQ(servelab::find_gate_metric("ttft_p99_ms")->path, "ttft_ms.p99");
  EXPECT_EQ(servelab::find_gate_metric("kv_breakdown_external_frag")->path, "kv_breakdown.external_frag");
  EXPECT_EQ(servelab::find_gate_metric("queue_p50_ms")->path, "queue_ms.p50");
}

// A quantized strategy's accuracy and a run's roofline efficiency gate like any metric; a strategy
// without a measured accuracy (the model's own formats, or the sim's note) has no value for it.
TEST(Gates, AccuracyAndRooflineFiguresGate) {
  RunSummary fp8;
  fp8.info.label = "fp8@4";
  fp8.info.strategy = "fp8";
  fp8.metrics.n_requests = 10;
  fp8.info.accuracy = FormatAccuracy{};
  fp8.info.accuracy->weights = "fp8";
  fp8.info.accuracy->kv_cache_dtype = "auto";
  fp8.info.accuracy->positions = 1024;
  fp8.info.accuracy->top1_agreement = 0.97;
  fp8.info.accuracy->mean_kl = 0.012;
  fp8.roofline = RooflineEfficiency{};
  fp8.roofline->decode.add(0.5, 1.0);
  fp8.roofline->overall.add(0.5, 1.0);
  RunSummary bf16 = fp8;
  bf16.info.label = "bf16@4";
  bf16.info.strategy = "bf16";
  bf16.info.accuracy.reset();
  Summary s;
  s.runs = {bf16, fp8};
  Gate kl{"accuracy.mean_kl", std::nullopt, 0.02, "fp8", std::nullopt};
  Gate top1{"accuracy.top1_agreement", 0.98, std::nullopt, "fp8", std::nullopt};
  Gate decode{"roofline.decode_efficiency", 0.45, std::nullopt, std::nullopt, std::nullopt};
  Gate prefill{"roofline.prefill_efficiency", 0.1, std::nullopt, "fp8", std::nullopt};
  Gate everyone{"accuracy.mean_kl", std::nullopt, 0.02, std::nullopt, std::nullopt};
  const auto res = evaluate_gates(s, {kl, top1, decode, prefill, everyone});
  EXPECT_TRUE(res[0].passed) << res[0].message;
  EXPECT_FALSE(res[1].passed) << res[1].message;  // 0.97 < 0.98
  EXPECT_TRUE(res[2].passed) << res[2].message;   // 0.5 in both runs
  EXPECT_FALSE(res[3].passed) << res[3].message;  // no prefill steps: no value
  EXPECT_FALSE(res[4].passed) << res[4].message;  // bf16 has no accuracy
  EXPECT_NE(res[4].message.find("no value"), std::string::npos) << res[4].message;
  EXPECT_EQ(metric_direction("accuracy.mean_kl"), MetricDirection::lower_is_better);
  EXPECT_EQ(metric_direction("roofline.efficiency"), MetricDirection::higher_is_better);
}

TEST(Gates, RateFilter) {
  Gate g = gate("ttft_ms.p99", std::nullopt, 500);
  g.rate = 8;
  EXPECT_FALSE(evaluate_gates(hand_summary(), {g})[0].passed);  // nothing at 8 req/s
  g.rate = 4;
  g.strategy = "continuous-paged";
  EXPECT_TRUE(evaluate_gates(hand_summary(), {g})[0].passed);
}

TEST(Gates, ValidateNamesTheProblem) {
  try {
    gate("ttft_p99", std::nullopt, 5).validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown metric 'ttft_p99'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ttft_ms.p99"), std::string::npos);  // lists the valid names
  }
  EXPECT_THROW(gate("goodput", std::nullopt, std::nullopt).validate(), std::invalid_argument);
  EXPECT_THROW(gate("goodput", 5, 1).validate(), std::invalid_argument);
  EXPECT_THROW(nlohmann::ordered_json::parse(R"({"metric": "goodput"})").get<Gate>(), std::invalid_argument);
}

TEST(Gates, JunitHasOneTestcasePerGateAndFailureElements) {
  auto res = evaluate_gates(hand_summary(), {gate("ttft_ms.p99", std::nullopt, 500, "continuous-paged"),
                                             gate("ttft_ms.p99", std::nullopt, 500)});
  res.push_back({"odd <name> & \"quotes\"", false, "a < b"});
  const std::string x = junit_xml(res, "servelab.ci");
  auto count = [&](const std::string& needle) {
    std::size_t n = 0;
    for (auto p = x.find(needle); p != std::string::npos; p = x.find(needle, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<testcase "), 3u);
  EXPECT_EQ(count("<failure "), 2u);
  EXPECT_NE(x.find("<testsuite name=\"servelab.ci\" tests=\"3\" failures=\"2\""), std::string::npos) << x;
  EXPECT_NE(x.find("name=\"ttft_ms.p99 &lt;= 500 [continuous-paged]\""), std::string::npos) << x;
  EXPECT_NE(x.find("odd &lt;name&gt; &amp; &quot;quotes&quot;"), std::string::npos) << x;
  EXPECT_EQ(x.find("a < b"), std::string::npos);
  EXPECT_EQ(x.rfind("<?xml", 0), 0u);
}

TEST(Gates, BaselineRegressionFailsOnlyBeyondThreshold) {
  const Summary base = hand_summary();
  Summary cur = hand_summary();
  BaselineSpec spec;
  spec.path = "base.json";
  spec.max_regression_pct = 10;
  spec.metrics = {"ttft_ms.p99", "goodput"};
  auto res = evaluate_baseline(cur, base, spec);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_TRUE(res[0].passed && res[1].passed);

  cur.runs[0].metrics.ttft_ms = summarize({100, 200, 330});  // p99 298 → 327.4: +9.9 %
  EXPECT_TRUE(evaluate_baseline(cur, base, spec)[0].passed);
  cur.runs[0].metrics.ttft_ms = summarize({100, 200, 340});  // p99 337.2: +13.2 %
  res = evaluate_baseline(cur, base, spec);
  EXPECT_FALSE(res[0].passed);
  EXPECT_NE(res[0].message.find("REGRESSION"), std::string::npos) << res[0].message;
  cur.runs[1].metrics.goodput = 440;  // 500 → 440: −12 %
  EXPECT_FALSE(evaluate_baseline(cur, base, spec)[1].passed);
  cur.runs[1].metrics.goodput = 600;  // better is never a regression
  EXPECT_TRUE(evaluate_baseline(cur, base, spec)[1].passed);
}

TEST(Gates, MetricLookupCoversNestedAndRunLevelNames) {
  Summary s = hand_summary();
  s.runs[0].metrics.kv = compute_kv_metrics(s.runs[0].info.label, {}, 0.0, 0.0);  // no steps
  EXPECT_DOUBLE_EQ(*run_metric(s.runs[1], "n_failed"), 2.0);
  EXPECT_NEAR(*run_metric(s.runs[0], "ttft_ms.p50"), 200.0, 1e-9);
  EXPECT_FALSE(run_metric(s.runs[0], "kv_utilization.mean").has_value());  // no steps: null
  EXPECT_EQ(metric_direction("goodput"), MetricDirection::higher_is_better);
  EXPECT_EQ(metric_direction("itl_ms.p99"), MetricDirection::lower_is_better);
}

}  // namespace
}  // namespace servelab::analysis
