// Roofline efficiency from step records: Σ roofline / Σ measured time over a run's steps, overall
// and per class (the classes summing to the whole), repetitions pooled; summary.json carries it
// (and round-trips it byte for byte), the reports and `compare` show it, sim runs say "sim".
#include "analysis/roofline_efficiency.h"

#include <gtest/gtest.h>

#include <sstream>

#include "analysis/compare.h"
#include "analysis/report.h"
#include "analysis/report_table.h"
#include "analysis/summary.h"
#include "tests/analysis/synthetic.h"

namespace servelab::analysis {
namespace roofline_efficiency_test {

StepRecord step_of(const std::string& run, StepClass c, double roofline_s, double measured_s) {
  StepRecord s;
  s.run = run;
  s.duration_s = measured_s;
  s.batch_size = 1;
  s.n_tokens = 1;
  s.roofline = StepRoofline{c, roofline_s, 1e6, 2e6};
  return s;
}

RooflineCeilings probe_ceilings() { return RooflineCeilings{12.5e9, 90e9, CeilingSource::probe, "probe: test"}; }

TEST(RooflineEfficiency, SumsOverStepsPerClassAndOverall) {
  std::vector<StepRecord> steps = {step_of("a@1", StepClass::prefill, 0.004, 0.010),
                                   step_of("a@1", StepClass::decode, 0.001, 0.004),
                                   step_of("a@1", StepClass::decode, 0.001, 0.006),
                                   step_of("a@1", StepClass::mixed, 0.003, 0.005),
                                   step_of("a@10", StepClass::decode, 0.5, 0.5),  // another run
                                   step_of("a@1", StepClass::decode, 0.0, 0.0)};
  steps.back().roofline.reset();  // a step without a roofline is not counted
  const auto e = roofline_efficiency("a@1", steps, probe_ceilings());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->overall.n_steps, 4);
  EXPECT_DOUBLE_EQ(e->overall.efficiency(), 0.009 / 0.025);
  EXPECT_DOUBLE_EQ(e->prefill.efficiency(), 0.4);
  EXPECT_DOUBLE_EQ(e->decode.efficiency(), 0.2);
  EXPECT_EQ(e->decode.n_steps, 2);
  EXPECT_DOUBLE_EQ(e->mixed.efficiency(), 0.6);
  // The classes partition the run's steps.
  EXPECT_EQ(e->prefill.n_steps + e->decode.n_steps + e->mixed.n_steps, e->overall.n_steps);
  EXPECT_DOUBLE_EQ(e->prefill.measured_s + e->decode.measured_s + e->mixed.measured_s, e->overall.measured_s);
  EXPECT_DOUBLE_EQ(e->prefill.roofline_s + e->decode.roofline_s + e->mixed.roofline_s, e->overall.roofline_s);
  ASSERT_TRUE(e->ceilings);
  EXPECT_EQ(e->ceilings->source, CeilingSource::probe);
}

TEST(RooflineEfficiency, PoolsRepetitionsAndIgnoresLookalikeLabels) {
  const std::vector<StepRecord> steps = {step_of("a@1#1", StepClass::decode, 1, 2), step_of("a@1#2", StepClass::decode, 1, 4),
                                         step_of("a@10", StepClass::decode, 1, 1)};
  const auto e = roofline_efficiency("a@1", steps, std::nullopt);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->overall.n_steps, 2);
  EXPECT_DOUBLE_EQ(e->overall.efficiency(), 2.0 / 6.0);
  EXPECT_FALSE(e->ceilings);
}

// A pause counts from a step that left requests running or waiting to the next step's start, in
// each repetition's own start order; one after a step that left nothing (idle, waiting for an
// arrival) does not. Round-trips through JSON; a summary written before it reads zeros.
TEST(RooflineEfficiency, HostPausesBetweenStepsWhileTheEngineHadWork) {
  auto at = [](const std::string& run, double start, double dur, int running, int waiting) {
    StepRecord s = step_of(run, StepClass::decode, 0.001, dur);
    s.start_s = start;
    s.n_running = running;
    s.n_waiting = waiting;
    return s;
  };
  const std::vector<StepRecord> steps = {
      at("a@1", 0.000, 0.010, 1, 0),  // then a 0.5 ms pause
      at("a@1", 0.0105, 0.010, 0, 2),  // waiting work: then a 30 ms pause
      at("a@1", 0.0505, 0.010, 0, 0),  // nothing left: the 1 s after it is idle, not a pause
      at("a@1", 1.0605, 0.010, 1, 0),  // the last step: no pause after it
      at("a@1#2", 0.0, 0.010, 1, 0),   // not a repetition of a@1 (no repeats): another label
  };
  // Out of start order in the file: sorted per run before the gaps are taken.
  std::vector<StepRecord> shuffled = {steps[2], steps[0], steps[3], steps[1]};
  const auto e = roofline_efficiency("a@1", shuffled, std::nullopt);
  ASSERT_TRUE(e);
  EXPECT_NEAR(e->host_pauses.s, 0.0005 + 0.030, 1e-12);
  EXPECT_NEAR(e->host_pauses.max_s, 0.030, 1e-12);
  EXPECT_EQ(e->host_pauses.n_over_1ms, 1);
  EXPECT_EQ(format_host_pauses(e->host_pauses), "0.03 (1 > 1 ms)");
  // Repetitions: each one's own order, summed.
  const auto r = roofline_efficiency("a@1", {steps[0], steps[1], at("a@1#2", 0.0, 0.010, 1, 0), at("a@1#2", 0.012, 0.01, 0, 0)},
                                     std::nullopt);
  ASSERT_TRUE(r);
  EXPECT_NEAR(r->host_pauses.s, 0.0005 + 0.002, 1e-12);
  EXPECT_EQ(r->host_pauses.n_over_1ms, 1);
  nlohmann::ordered_json j = *e;
  EXPECT_EQ(j["host_pauses"]["n_over_1ms"], 1);
  const RooflineEfficiency back = j.get<RooflineEfficiency>();
  EXPECT_DOUBLE_EQ(back.host_pauses.s, e->host_pauses.s);
  EXPECT_DOUBLE_EQ(back.host_pauses.max_s, e->host_pauses.max_s);
  j.erase("host_pauses");
  EXPECT_EQ(j.get<RooflineEfficiency>().host_pauses.n_over_1ms, 0);
}

TEST(RooflineEfficiency, NoneWithoutRooflines) {
  const std::vector<StepRecord> steps = {StepRecord{}};
  EXPECT_FALSE(roofline_efficiency("", steps, std::nullopt));
  EXPECT_EQ(format_efficiency(std::nullopt, "sim"), "sim");
  EXPECT_EQ(format_efficiency(std::nullopt, "cpu"), "-");
}

TEST(RooflineEfficiency, EmptyClassIsNullInJson) {
  RooflineEfficiency e;
  e.overall.add(1, 2);
  e.decode.add(1, 2);
  nlohmann::ordered_json j = e;
  EXPECT_TRUE(j["by_class"]["prefill"]["efficiency"].is_null());
  EXPECT_EQ(j["by_class"]["prefill"]["n_steps"], 0);
  EXPECT_DOUBLE_EQ(j["efficiency"].get<double>(), 0.5);
  EXPECT_TRUE(j["ceilings"].is_null());
  const RooflineEfficiency back = j.get<RooflineEfficiency>();
  EXPECT_EQ(back.decode.n_steps, 1);
  EXPECT_THROW(nlohmann::ordered_json({{"n_steps", 1}}).get<RooflineEfficiency>(), std::invalid_argument);
}

/// One real-looking cpu run with rooflines and one sim run without.
Summary cpu_and_sim_summary(double decode_measured_s = 0.004) {
  std::vector<RunInfo> infos;
  std::vector<RequestRecord> records;
  std::vector<StepRecord> steps;
  RunInfo cpu = testing_data::run_info("continuous", "paged", 2.0, 20);
  cpu.backend = "cpu";
  cpu.roofline_ceilings = probe_ceilings();
  infos.push_back(cpu);
  testing_data::append_run({cpu, 0.05, 0.02}, 20, 7, records, steps);
  for (StepRecord& s : steps) s.roofline = StepRoofline{StepClass::decode, 0.001, 1e6, 1e7}, s.duration_s = decode_measured_s;
  steps.front().roofline->step_class = StepClass::prefill;
  RunInfo sim = testing_data::run_info("static", "naive", 2.0, 20);
  infos.push_back(sim);
  testing_data::append_run({sim, 0.05, 0.02}, 20, 8, records, steps);
  ScenarioInfo sc;
  sc.name = "roofline";
  return build_summary(sc, Environment{}, SloSpec{}, infos, records, steps);
}

TEST(RooflineSummary, FieldsAppearAndParse) {
  const Summary s = cpu_and_sim_summary();
  ASSERT_EQ(s.runs.size(), 2u);
  ASSERT_TRUE(s.runs[0].roofline);
  EXPECT_FALSE(s.runs[1].roofline);  // the sim's steps carry none
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(summary_text(s));
  const auto& r = j["runs"][0]["roofline"];
  for (const char* key : {"efficiency", "roofline_s", "measured_s", "n_steps", "by_class", "ceilings", "host_pauses"})
    EXPECT_TRUE(r.contains(key)) << key;
  for (const char* cls : {"prefill", "decode", "mixed"}) EXPECT_TRUE(r["by_class"].contains(cls)) << cls;
  EXPECT_DOUBLE_EQ(r["efficiency"].get<double>(), 0.25);
  EXPECT_EQ(r["ceilings"]["source"], "probe");
  EXPECT_DOUBLE_EQ(r["ceilings"]["copy_bytes_s"].get<double>(), 12.5e9);
  EXPECT_FALSE(j["runs"][1].contains("roofline"));
  // Read back and written again: the same bytes.
  Summary back = j.get<Summary>();
  EXPECT_EQ(summary_text(back), summary_text(s));
  ASSERT_TRUE(back.runs[0].info.roofline_ceilings);
}

TEST(RooflineSummary, RunsJsonKeepsTheCeilings) {
  RunInfo info = testing_data::run_info("continuous", "paged", 2.0, 20);
  info.roofline_ceilings = probe_ceilings();
  const nlohmann::ordered_json j = info;
  EXPECT_EQ(j["roofline_ceilings"]["detail"], "probe: test");
  const RunInfo back = j.get<RunInfo>();
  ASSERT_TRUE(back.roofline_ceilings);
  EXPECT_DOUBLE_EQ(back.roofline_ceilings->gemm_flops, 90e9);
}

TEST(RooflineReports, TablesAndConsoleShowItAndTheCeilings) {
  const Summary s = cpu_and_sim_summary();
  const TextRows t = roofline_table(s);
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0][2], "0.250");
  EXPECT_EQ(t.rows[1][2], "sim");
  EXPECT_EQ(t.header.back(), "host pauses (s)");
  EXPECT_EQ(t.rows[1].back(), "-");
  const std::string md = report_markdown(s, {}, {}, {});
  EXPECT_NE(md.find("## Roofline efficiency"), std::string::npos);
  EXPECT_NE(md.find("copy 12.5 GB/s, GEMM 90.0 GFLOP/s (probe)"), std::string::npos) << md;
  std::ostringstream console;
  print_console_summary(console, s);
  EXPECT_NE(console.str().find("roofline efficiency continuous-paged@2: 0.250"), std::string::npos) << console.str();
  // No roofline anywhere (a sim sweep): no table, no line.
  Summary sim_only = s;
  sim_only.runs[0].roofline.reset();
  EXPECT_TRUE(roofline_table(sim_only).empty());
  EXPECT_EQ(report_markdown(sim_only, {}, {}, {}).find("Roofline"), std::string::npos);
}

TEST(RooflineCompare, OneRowPerStrategyWithTheChange) {
  const Summary base = cpu_and_sim_summary(0.004), cur = cpu_and_sim_summary(0.002);
  const Comparison c = compare_summaries(base, cur, 10.0);
  ASSERT_EQ(c.roofline.size(), 2u);
  EXPECT_EQ(c.roofline[0].strategy, "continuous-paged");
  ASSERT_TRUE(c.roofline[0].base && c.roofline[0].current);
  EXPECT_DOUBLE_EQ(c.roofline[0].base->overall.efficiency(), 0.25);
  EXPECT_DOUBLE_EQ(c.roofline[0].current->overall.efficiency(), 0.5);
  EXPECT_FALSE(c.roofline[1].current);
  std::ostringstream out;
  print_comparison(out, c);
  EXPECT_NE(out.str().find("roofline efficiency by strategy"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("+100.0%"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("host pauses (s) base / new"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("0.00 (0 > 1 ms) / 0.00 (0 > 1 ms)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("sim"), std::string::npos) << out.str();
}

}  // namespace roofline_efficiency_test
}  // namespace servelab::analysis
