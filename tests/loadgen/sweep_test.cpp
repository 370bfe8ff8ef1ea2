// Sweeps: one Planner per run, so a dataset or trace is read once however many rates and
// strategies there are.
#include <gtest/gtest.h>

#include <filesystem>

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

}  // namespace
}  // namespace servelab
