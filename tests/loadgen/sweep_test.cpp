// Sweeps: one Planner per run, so a dataset or trace is read once however many rates and
// strategies there are.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "loadgen/plan.h"
#include "loadgen/sweep.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace {

using testing_util::load_yaml;
using testing_util::write_temp;

TEST(Sweep, DatasetIsReadOncePerRun) {
  const std::string ds = write_temp("sweep_ds.jsonl",
                                    "{\"prompt_tokens\": 10, \"output_tokens\": 4}\n"
                                    "{\"prompt_tokens\": 20, \"output_tokens\": 3}\n");
  const Scenario s = load_yaml(
      "seed: 3\n"
      "backend: {kind: sim}\n"
      "engine: {max_model_len: 256}\n"
      "strategies: [{batching: continuous}, {batching: static, batch_size: 2, kv: {kind: naive}}]\n"
      "workload:\n"
      "  rates: [2, 8]\n"
      "  n_requests: 4\n"
      "  prompt_tokens: {dataset: sweep_ds.jsonl}\n"
      "  output_tokens: {dataset: sweep_ds.jsonl}\n");
  const Planner planner(s);
  // Everything after this point must work from what the planner read: the file is gone.
  std::filesystem::remove(ds);
  const std::vector<SweepRun> points = plan_sweep(planner);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[3].label, "static-naive@8");
  EXPECT_EQ(points[3].n_planned, 4);

  SweepOptions opts;
  opts.out_dir = std::filesystem::path(write_temp("sweep_out_marker", "")).parent_path() / "sweep_out";
  const SweepOutcome out = run_sweep(planner, opts);
  EXPECT_FALSE(out.interrupted);
  EXPECT_EQ(out.runs.size(), 4u);
  ASSERT_EQ(out.records.size(), 16u);
  for (const RequestRecord& r : out.records) {
    EXPECT_TRUE(r.prompt_tokens == 10 || r.prompt_tokens == 20) << r.prompt_tokens;
    EXPECT_EQ(r.output_tokens, r.prompt_tokens == 10 ? 4 : 3);
  }
  // The Scenario overloads read the file themselves, so they fail now that it is gone.
  EXPECT_THROW(plan_sweep(s), std::runtime_error);
}

// A strategy's own `lora:` (strategy_lora): the base model beside 8 adapters and beside
// workload.lora's 2, over the same requests, on the sim; each run's records name the adapters its
// strategy draws, and its steps ran them.
TEST(Sweep, EachStrategyRunsItsOwnAdaptersOverTheSameRequests) {
  const Scenario s = load_yaml(
      "seed: 5\n"
      "backend: {kind: sim}\n"
      "engine: {max_model_len: 256}\n"
      "strategies:\n"
      "  - {label: base, batching: continuous, lora: none}\n"
      "  - {label: eight, batching: continuous, lora: {count: 8, distribution: zipf, max_loras: 4, rank: 8}}\n"
      "  - {label: workload, batching: continuous}\n"
      "workload:\n"
      "  rates: [20]\n"
      "  n_requests: 40\n"
      "  prompt_tokens: {dist: uniform, min: 8, max: 32}\n"
      "  output_tokens: {dist: uniform, min: 2, max: 8}\n"
      "  lora: {adapters: [sql, chat], max_loras: 2}\n");
  ASSERT_TRUE(s.strategies[0].lora.has_value());
  EXPECT_FALSE(s.strategies[0].lora->enabled());
  EXPECT_EQ(s.strategies[1].lora->adapters.size(), 8u);
  EXPECT_FALSE(s.strategies[2].lora.has_value());

  SweepOptions opts;
  opts.out_dir = std::filesystem::path(write_temp("sweep_lora_marker", "")).parent_path() / "sweep_lora_out";
  const SweepOutcome out = run_sweep(s, opts);
  ASSERT_EQ(out.runs.size(), 3u);
  EXPECT_EQ(out.runs[0].config.value("lora_adapters", -1), 0);
  EXPECT_EQ(out.runs[1].config.value("lora_adapters", -1), 8);
  EXPECT_EQ(out.runs[1].config.value("max_loras", -1), 4);
  EXPECT_FALSE(out.runs[2].config.contains("lora_adapters"));  // workload.lora's: the scenario says
  std::map<std::string, std::map<uint64_t, const RequestRecord*>> by_run;
  for (const RequestRecord& r : out.records) by_run[r.run][r.id] = &r;
  ASSERT_EQ(by_run.size(), 3u);
  const auto& base = by_run["base@20"];
  const auto& eight = by_run["eight@20"];
  const auto& wl = by_run["workload@20"];
  ASSERT_EQ(base.size(), 40u);
  ASSERT_EQ(eight.size(), 40u);
  ASSERT_EQ(wl.size(), 40u);
  std::set<std::string> eight_names;
  for (const auto& [id, r] : base) {
    EXPECT_TRUE(r->lora.empty()) << id;
    const RequestRecord& e = *eight.at(id);
    const RequestRecord& w = *wl.at(id);
    EXPECT_EQ(e.prompt_tokens, r->prompt_tokens) << id;  // the same requests
    EXPECT_EQ(w.prompt_tokens, r->prompt_tokens) << id;
    EXPECT_EQ(e.arrival_s, r->arrival_s) << id;
    EXPECT_EQ(e.lora.rfind("lora-", 0), 0u) << e.lora;
    eight_names.insert(e.lora);
    EXPECT_TRUE(w.lora == "sql" || w.lora == "chat") << w.lora;
  }
  EXPECT_GE(eight_names.size(), 4u);  // Zipf over 8: several of them in 40 requests
  int adapter_steps[3] = {0, 0, 0};
  for (const StepRecord& st : out.steps) {
    const int i = st.run.rfind("base", 0) == 0 ? 0 : st.run.rfind("eight", 0) == 0 ? 1 : 2;
    adapter_steps[i] += st.n_loras > 0;
    if (i == 1) {
      EXPECT_LE(st.n_loras, 4) << "max_loras";
    }
  }
  EXPECT_EQ(adapter_steps[0], 0);
  EXPECT_GT(adapter_steps[1], 0);
  EXPECT_GT(adapter_steps[2], 0);
}

// A real backend's run gets room for its step records before it starts (planned_step_room), so
// the sweep's records never move mid-run: every run's steps fit its plan's room, chunked
// prefills and a static batch's padding included, and the room is capped.
TEST(Sweep, ARealRunsStepsFitTheRoomMadeBeforeIt) {
  const Scenario s = load_yaml(
      "seed: 7\n"
      "model: {preset: tiny}\n"
      "backend: {kind: cpu, threads: 1}\n"
      "engine: {max_model_len: 256}\n"
      "strategies:\n"
      "  - {label: chunked, batching: continuous, max_num_seqs: 8, max_num_batched_tokens: 16, chunked_prefill: true}\n"
      "  - {label: static, batching: static, batch_size: 4, kv: {kind: naive}}\n"
      "workload:\n"
      "  rates: [200]\n"
      "  n_requests: 10\n"
      "  prompt_tokens: {dist: uniform, min: 8, max: 96}\n"
      "  output_tokens: {dist: uniform, min: 1, max: 6}\n");
  SweepOptions opts;
  opts.out_dir = std::filesystem::path(write_temp("sweep_room_marker", "")).parent_path() / "sweep_room_out";
  const SweepOutcome out = run_sweep(s, opts);
  const Plan plan = Planner(s).make(200, PlanPrompts::on_demand);
  const size_t room = planned_step_room(plan);
  std::map<std::string, size_t> steps;
  for (const StepRecord& st : out.steps) ++steps[st.run];
  ASSERT_EQ(steps.size(), 2u);
  for (const auto& [run, n] : steps) EXPECT_LE(n, room) << run;
  EXPECT_GE(out.steps.capacity(), out.steps.size());
  Plan huge;
  huge.requests.resize(10, PlannedRequest{});
  huge.requests[0].output_tokens = 1 << 22;
  EXPECT_EQ(planned_step_room(huge), size_t(1) << 20);
}

}  // namespace
}  // namespace servelab
