// Speculative strategies on backend sim: `speculative.sim_acceptance` read and checked with
// file:line errors (a list, or a real run's summary.json), and a sim run whose metrics carry the
// spec_decode counters at the rates given.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/spec/sim_acceptance.h"
#include "loadgen/records/step_record.h"
#include "loadgen/scenario.h"
#include "loadgen/sweep.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace sim_spec_scenario_test {  // named, not anonymous: a unity batch shares one translation unit

using testing_util::load_yaml;
using testing_util::scenario_errors;
using testing_util::write_temp;

std::string one_error(const std::string& yaml) {
  const auto errs = scenario_errors(yaml);
  std::string all;
  for (const auto& e : errs) all += e + "\n";
  EXPECT_EQ(errs.size(), 1u) << all;
  return errs.empty() ? "" : errs[0];
}

const std::string kSimSelf =
    "seed: 3\n"
    "model: {preset: tiny}\n"
    "backend: {kind: sim, sim_device: cpu-2core}\n"
    "strategies:\n"
    "  - label: self\n"
    "    batching: continuous\n"
    "    speculative:\n"
    "      method: self\n"
    "      num_layers: 1\n"
    "      num_speculative_tokens: 3\n";

TEST(ScenarioErrors, SimAcceptanceIsCheckedWhereItIsWritten) {
  const std::string w = "workload: {rates: [1]}\n";
  EXPECT_EQ(one_error(kSimSelf + w),
            "scn.yaml:8:15: strategies[0].speculative.method: self on backend sim needs "
            "strategies[0].speculative.sim_acceptance ({per_position: [p1, p2, ...]} or {summary: FILE}): the sim "
            "runs no draft model, it accepts drafts at the rates given");
  EXPECT_EQ(one_error(kSimSelf + "      sim_acceptance: {per_position: [0.9, 1.2, 0.5]}\n" + w),
            "scn.yaml:11:44: strategies[0].speculative.sim_acceptance.per_position[1] must be in [0, 1] (got '1.2')");
  EXPECT_EQ(one_error(kSimSelf + "      sim_acceptance: {per_position: [0.9, 0.8]}\n" + w),
            "scn.yaml:11:38: strategies[0].speculative.sim_acceptance.per_position needs one entry per draft "
            "position: num_speculative_tokens (3) to 16 (got 2)");
  EXPECT_EQ(one_error(kSimSelf + "      sim_acceptance: {per_position: [0.9, 0.8, 0.7], summary: s.json}\n" + w),
            "scn.yaml:11:23: strategies[0].speculative.sim_acceptance needs exactly one of per_position (a list) or "
            "summary (a summary.json)");
  const std::string missing = one_error(kSimSelf + "      sim_acceptance: {summary: nothere.json}\n" + w);
  EXPECT_EQ(missing.rfind("scn.yaml:11:33: strategies[0].speculative.sim_acceptance.summary: ", 0), 0u) << missing;
  EXPECT_NE(missing.find("nothere.json: cannot read the summary"), std::string::npos) << missing;
  EXPECT_EQ(one_error("backend: {kind: cpu}\n"
                      "strategies:\n"
                      "  - batching: continuous\n"
                      "    speculative: {method: ngram, sim_acceptance: {per_position: [0.5, 0.5, 0.5]}}\n" + w),
            "scn.yaml:4:50: strategies[0].speculative.sim_acceptance applies to backend kind: sim (got cpu; a real "
            "backend measures its acceptance)");
}

TEST(SimSpeculation, ASelfStrategyOnTheSimCarriesSpecDecodeCountersAtTheRatesGiven) {
  // A real run's summary with adaptive drafts: position 3 was tried 40 times (not 80).
  const std::string summary = write_temp(
      "spec_summary.json",
      R"({"runs": [{"strategy": "self", "metrics": {"spec_decode": {"num_drafts": 100, "num_accepted_tokens_per_pos": [80, 60, 20],)"
      R"( "num_draft_tokens_per_pos": [100, 100, 50]}}}, {"strategy": "plain", "metrics": {}}]})");
  const Scenario sc = load_yaml(kSimSelf + "      sim_acceptance: {summary: " + summary +
                                "}\n"
                                "workload: {rates: [20], n_requests: 60, prompt_tokens: 32, output_tokens: 64}\n");
  const auto& acc = sc.strategies.at(0).speculative->sim_acceptance;
  ASSERT_TRUE(acc.has_value());
  ASSERT_EQ(acc->per_position.size(), 3u);
  EXPECT_DOUBLE_EQ(acc->per_position[0], 0.8);
  EXPECT_DOUBLE_EQ(acc->per_position[1], 0.75);
  EXPECT_DOUBLE_EQ(acc->per_position[2], (20.0 / 50) / 0.6);
  EXPECT_EQ(acc->source, summary);
  EXPECT_TRUE(acc->request_scale.empty());  // every request alike without a requests file

  // With request_acceptance.py's counts (two requests at 5 and 15 rejections of 60 tries at
  // position 0): a scale each, mean 1, the one that rejected more above the other.
  const std::string requests = write_temp(
      "request_acceptance.json",
      R"({"k_max": 3, "requests": [{"id": 0, "output_tokens": 64, "tried_per_pos": [60, 55, 30], "accepted_per_pos": [55, 50, 10]},)"
      R"( {"id": 1, "output_tokens": 64, "tried_per_pos": [60, 45, 30], "accepted_per_pos": [45, 40, 10]}]})");
  const Scenario spread = load_yaml(kSimSelf + "      sim_acceptance: {summary: " + summary + ", requests: " + requests +
                                    "}\n"
                                    "workload: {rates: [20], n_requests: 60, prompt_tokens: 32, output_tokens: 64}\n");
  const std::vector<double> scale = spread.strategies.at(0).speculative->sim_acceptance->request_scale;
  ASSERT_EQ(scale.size(), 2u);
  EXPECT_NEAR(scale[0] + scale[1], 2.0, 1e-12);
  EXPECT_LT(scale[0], scale[1]);
  const std::string bad = one_error(kSimSelf + "      sim_acceptance: {summary: " + summary +
                                    ", requests: nothere.json}\nworkload: {rates: [1]}\n");
  EXPECT_NE(bad.find("strategies[0].speculative.sim_acceptance.requests: "), std::string::npos) << bad;
  EXPECT_NE(bad.find("nothere.json: cannot read the requests file"), std::string::npos) << bad;

  SweepOptions opts;
  opts.out_dir = (std::filesystem::path(summary).parent_path() / "sim_spec_run").string();
  const SweepOutcome out = run_sweep(sc, opts);
  ASSERT_EQ(out.runs.size(), 1u);
  EXPECT_EQ(out.records.size(), 60u);
  // The steps carry vLLM's counters and the drafts per position (summary.json sums them:
  // SimSpeculation.TheSummaryCarriesTheCounters in tests/engine).
  int64_t drafts = 0;
  std::vector<int64_t> accepted(3, 0), drafted(3, 0);
  double draft_s = 0.0, catch_up_s = 0.0;
  int probes = 0;
  for (const StepRecord& s : out.steps) {
    catch_up_s += s.spec_catch_up_s;
    if (s.spec_catch_up_s > 0) {  // the newcomers' prompts, told apart in steps.jsonl
      EXPECT_EQ(nlohmann::json(s).get<StepRecord>().spec_catch_up_s, s.spec_catch_up_s);
    }
    if (s.spec_probe_drafts > 0) {  // the measured rule's probes (warm-up), their counters apart
      ++probes;
      const StepRecord back = nlohmann::json(s).get<StepRecord>();
      EXPECT_EQ(back.spec_probe_drafts, s.spec_probe_drafts);
      EXPECT_EQ(back.spec_probe_draft_tokens, s.spec_probe_draft_tokens);
      EXPECT_EQ(back.spec_probe_accepted_tokens, s.spec_probe_accepted_tokens);
      EXPECT_EQ(s.spec_drafts, 0);
    }
    drafts += s.spec_drafts;
    for (size_t j = 0; j < s.spec_accepted_per_pos.size() && j < 3; ++j) accepted[j] += s.spec_accepted_per_pos[j];
    for (size_t j = 0; j < s.spec_drafted_per_pos.size() && j < 3; ++j) drafted[j] += s.spec_drafted_per_pos[j];
    draft_s += s.spec_draft_s;
  }
  ASSERT_GT(drafts, 300);
  const SimAcceptance seen = SimAcceptance::from_counters(drafts, accepted, drafted);
  for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(seen.per_position[j], acc->per_position[j], 0.1) << j;
  EXPECT_GT(draft_s, 0.0);  // the one-layer draft is priced
  EXPECT_GT(catch_up_s, 0.0);
  EXPECT_LT(catch_up_s, draft_s);
  EXPECT_GE(probes, 1);
}

}  // namespace sim_spec_scenario_test
}  // namespace servelab
