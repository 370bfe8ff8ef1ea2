// Multi-LoRA adapter loads from step records (analysis/lora_loads.h): the steps of a run (and its
// repetitions) that loaded adapters, how many, their median and total time; summary.json carries
// them as "lora_loads" (and reads them back byte for byte), report.md shows them in a table.
#include "analysis/lora_loads.h"

#include <gtest/gtest.h>

#include "analysis/report.h"
#include "analysis/report_table.h"
#include "analysis/summary.h"
#include "tests/analysis/synthetic.h"

namespace servelab::analysis {
namespace lora_loads_test {  // named, not anonymous: a unity batch shares one translation unit

StepRecord step_of(const std::string& run, int loads, double duration_s) {
  StepRecord s;
  s.run = run;
  s.duration_s = duration_s;
  s.batch_size = 1;
  s.n_tokens = 1;
  s.n_loras = loads > 0 ? 1 : 0;
  s.n_lora_loads = loads;
  return s;
}

TEST(LoraLoads, CountsARunsStepsWithLoadsAndTheirMedian) {
  const std::vector<StepRecord> steps = {step_of("a@1", 1, 0.020), step_of("a@1", 0, 0.005), step_of("a@1#2", 2, 0.030),
                                         step_of("a@1", 1, 0.010), step_of("a@10", 1, 0.5), step_of("a@1", 1, 0.040)};
  const auto l = lora_loads("a@1", steps);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->n_loads, 5);
  EXPECT_EQ(l->n_steps, 4);  // a@10 is another run; the step without a load is not counted
  EXPECT_NEAR(l->step_s, 0.100, 1e-12);
  EXPECT_NEAR(l->step_p50_ms, 25.0, 1e-9);  // between 20 and 30
  EXPECT_EQ(l->wait_steps, 0);
  EXPECT_FALSE(lora_loads("b@1", steps));
  // Steps in which a request waited for its adapter's packing (lora.admit_when_packed).
  std::vector<StepRecord> waited = steps;
  waited[1].n_lora_waits = 2;   // a step without a load
  waited[3].n_lora_waits = 1;   // and one with
  waited[4].n_lora_waits = 1;   // another run's
  const auto w = lora_loads("a@1", waited);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->n_steps, 4);
  EXPECT_EQ(w->wait_steps, 2);
  EXPECT_NEAR(w->wait_s, 0.015, 1e-12);
  const auto odd = lora_loads("a@10", steps);
  ASSERT_TRUE(odd);
  EXPECT_NEAR(odd->step_p50_ms, 500.0, 1e-9);
}

TEST(LoraLoads, SummaryCarriesThemAndTheReportShowsThem) {
  RunInfo info = testing_data::run_info("continuous", "paged", 2.0, 20);
  std::vector<RequestRecord> records;
  std::vector<StepRecord> steps;
  testing_data::append_run({info, 0.05, 0.02}, 20, 7, records, steps);
  ASSERT_GE(steps.size(), 2u);
  steps[0].n_loras = steps[0].n_lora_loads = 1;
  steps[0].duration_s = 0.025;
  steps[1].n_lora_waits = 1;
  ScenarioInfo sc;
  sc.name = "lora";
  const Summary s = build_summary(sc, Environment{}, SloSpec{}, {info}, records, steps);
  ASSERT_TRUE(s.runs[0].lora_loads);
  EXPECT_EQ(s.runs[0].lora_loads->n_steps, 1);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(summary_text(s));
  EXPECT_EQ(j["runs"][0]["lora_loads"]["n_loads"], 1);
  EXPECT_EQ(summary_text(j.get<Summary>()), summary_text(s));  // read back, written again: the same bytes
  const TextRows t = lora_loads_table(s);
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0][2], "1");
  EXPECT_EQ(t.rows[0][6], "1");  // the step a request waited for its adapter's packing
  EXPECT_EQ(j["runs"][0]["lora_loads"]["wait_steps"], 1);
  EXPECT_NE(report_markdown(s, {}, {}, {}).find("## Multi-LoRA, adapter loads"), std::string::npos);
  steps[0].n_lora_loads = 0;  // none: no field, no table
  const Summary none = build_summary(sc, Environment{}, SloSpec{}, {info}, records, steps);
  EXPECT_FALSE(nlohmann::ordered_json::parse(summary_text(none))["runs"][0].contains("lora_loads"));
  EXPECT_TRUE(lora_loads_table(none).empty());
}

}  // namespace lora_loads_test
}  // namespace servelab::analysis
