// `servelab profile --lora-rank` (engine/backend/profile_lora.h): LoRA points timed against their
// base twins after the grid, and the sim's LoRA figures fitted to them (sim_lora.h's fit_lora), so
// a profile prices adapters on the device it was taken on.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/cost_model.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/forwarding_backend.h"
#include "engine/backend/profile_lora.h"
#include "engine/backend/profiler.h"
#include "engine/backend/sim_backend.h"
#include "engine/backend/sim_lora.h"
#include "engine/model/config.h"
#include "engine/lora/lora_adapter.h"
#include "tests/backend/backend_test_util.h"
#include "tests/engine/profile_fixture.h"

namespace servelab {
namespace profiler_lora_test {  // named: a unity batch shares one translation unit

ProfileOptions lora_options() {
  ProfileOptions o;
  o.prefill_lens = {8, 24};
  o.batch_sizes = {1, 4, 16};
  o.contexts = {16, 32};
  o.prompt_lens = {8};
  o.chunk_lens = {8};
  o.repeats = 2;
  o.min_point_s = 0.0;
  o.padded_decodes = false;
  o.lora_rank = 4;
  o.lora_adapters = {1, 8};
  return o;
}

int distinct(const ProfilePoint& p) {
  std::set<int> s;
  for (const ProfilePoint::Seq& q : p.seqs) s.insert(q.lora_slot);
  return int(s.size());
}

TEST(ProfilerLora, GridTimesEveryBatchOnOneAdapterAndTheEndsAndMiddleOnMany) {
  const std::vector<ProfilePoint> g = lora_profile_grid(lora_options());
  // Decodes: batch 1 (1 adapter), 4 (1; 8 > 4), 16 (1 and 8) at the middle context; prefills of
  // the shortest and longest prompt; a batched prefill at the middle batch (4 x 8, 1 adapter).
  ASSERT_EQ(g.size(), 4u + 2u + 1u);
  std::vector<std::pair<size_t, int>> decodes;
  for (const ProfilePoint& p : g) {
    for (size_t i = 0; i < p.seqs.size(); ++i) EXPECT_EQ(p.seqs[i].lora_slot, int(i) % distinct(p)) << p.describe();
    if (p.phase == ProfilePhase::decode) {
      decodes.push_back({p.seqs.size(), distinct(p)});
      EXPECT_EQ(p.seqs[0].context, 32);
    }
  }
  EXPECT_EQ(decodes, (std::vector<std::pair<size_t, int>>{{1, 1}, {4, 1}, {16, 1}, {16, 8}}));
  EXPECT_EQ(g[4].seqs[0].n_new, 8);
  EXPECT_EQ(g[5].seqs[0].n_new, 24);
  EXPECT_EQ(g[6].seqs.size(), 4u);
  // More batch sizes than six: six of them, spread (the ends kept), the middle ones on one
  // adapter only; every prompt length (up to six) as a one-prompt prefill.
  ProfileOptions wide = lora_options();
  wide.batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128};
  wide.prefill_lens = {8, 16, 24, 32};
  wide.max_rows = 4096;
  std::vector<std::pair<size_t, int>> wide_decodes;
  std::vector<int> prompts;
  for (const ProfilePoint& p : lora_profile_grid(wide)) {
    if (p.phase == ProfilePhase::decode) wide_decodes.push_back({p.seqs.size(), distinct(p)});
    else if (p.seqs.size() == 1) prompts.push_back(p.seqs[0].n_new);
  }
  EXPECT_EQ(wide_decodes, (std::vector<std::pair<size_t, int>>{
                              {1, 1}, {2, 1}, {4, 1}, {16, 1}, {16, 8}, {32, 1}, {128, 1}, {128, 8}}));
  EXPECT_EQ(prompts, (std::vector<int>{8, 16, 24, 32}));
  ProfileOptions none = lora_options();
  none.lora_rank = 0;
  EXPECT_TRUE(lora_profile_grid(none).empty());
  none.lora_rank = 300;
  EXPECT_THROW(none.validate(), std::invalid_argument);
  none.lora_rank = 4;
  none.lora_adapters = {0};
  EXPECT_THROW(none.validate(), std::invalid_argument);
}

TEST(ProfilerLora, TheFitRecoversTheFiguresThatPricedThePoints) {
  const ModelConfig m = preset("llama2-7b");
  SimDevice truth = SimDevice::preset("h100");
  truth.lora_decode_knots = 3;  // dearer at 16 rows than one per-row figure would say
  truth.lora_decode_knot_rows = {1, 16, 64};
  truth.lora_decode_knot_s = {5e-6, 30e-6, 50e-6};
  truth.lora_prefill_layer_s = 18e-6;
  truth.lora_prefill_run_s = 40e-6;
  truth.lora_prefill_row_s = 0.07e-6;
  truth.lora_bandwidth_share = 0.45;
  LoraProfile lp;
  lp.rank = 16;
  LoraAdapter shape;
  shape.rank = 16;
  shape.targets.fill(true);
  lp.params = lora_params(m, &shape);
  for (int b : {1, 16, 64})
    for (int k : {1, 8})
      if (k <= b) lp.points.push_back({false, b, b, k, 512, 0.0, 0.0});
  for (auto [n, len, k] : {std::tuple{1, 128, 1}, {1, 1024, 1}, {8, 128, 1}, {8, 128, 8}})
    lp.points.push_back({true, n, int64_t(n) * len, k, 0, 0.0, 0.0});
  for (LoraProfilePoint& p : lp.points) {
    p.base_s = 5e-3 + 1e-6 * double(p.rows);
    p.lora_s = p.base_s + lora_point_seconds(truth, m, lp.params, p);
  }
  // From the preset's own (H100) figures: every one moves to the truth.
  const SimDevice fit = fit_lora(SimDevice::preset("h100"), m, lp);
  ASSERT_EQ(fit.lora_decode_knots, 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(fit.lora_decode_knot_rows[i], truth.lora_decode_knot_rows[i]);
    EXPECT_NEAR(fit.lora_decode_knot_s[i], truth.lora_decode_knot_s[i], 1e-6 * truth.lora_decode_knot_s[i]);
  }
  EXPECT_NEAR(fit.lora_decode_row_s, 50e-6 / 64, 1e-6 * 50e-6 / 64);  // past the last knot: its rate
  EXPECT_NEAR(fit.lora_prefill_layer_s, truth.lora_prefill_layer_s, 1e-6 * truth.lora_prefill_layer_s);
  EXPECT_NEAR(fit.lora_prefill_run_s, truth.lora_prefill_run_s, 1e-6 * truth.lora_prefill_run_s);
  EXPECT_NEAR(fit.lora_prefill_row_s, truth.lora_prefill_row_s, 1e-5 * truth.lora_prefill_row_s);
  EXPECT_NEAR(fit.lora_bandwidth_share, truth.lora_bandwidth_share, 1e-6);
  // Adapters that cost nothing (measured at or below the base): zeros and the full bandwidth,
  // never a negative figure.
  for (LoraProfilePoint& p : lp.points) p.lora_s = p.base_s * 0.999;
  const SimDevice none = fit_lora(SimDevice::preset("h100"), m, lp);
  for (double x : {none.lora_decode_row_s, none.lora_prefill_layer_s, none.lora_prefill_run_s, none.lora_prefill_row_s,
                   none.lora_decode_knot_s[0], none.lora_decode_knot_s[1], none.lora_decode_knot_s[2]})
    EXPECT_EQ(x, 0.0);
  EXPECT_EQ(none.lora_bandwidth_share, 1.0);
  lp.points[0].adapters = 2;  // more adapters than the batch-1 decode has sequences
  EXPECT_THROW(fit_lora(SimDevice::preset("h100"), m, lp), std::invalid_argument);
}

TEST(ProfilerLora, ASimProfileOfAdaptersIsPricedAsTheDeviceThatTimedIt) {
  // The sim backend prices adapters at its device's figures: a profile of it, loaded back, fits
  // those figures again, and its LoRA points cost what the figures say.
  const ModelConfig m = preset("tiny");
  SimDevice truth = SimDevice::preset("h200");
  truth.lora_decode_knots = 0;  // a figure per row: the fit's knots then lie on its line
  truth.lora_decode_row_s = 2.0e-6;
  truth.lora_prefill_run_s = 11e-6;
  SimBackend sim(m, SimCostModel::roofline(truth));
  ProfileOptions o = lora_options();
  o.prefill_lens = {64, 512};
  o.prompt_lens = {128};
  o.batch_sizes = {1, 16, 64};
  o.contexts = {256};
  o.max_rows = 4096;
  o.fill_kv = false;
  ProfileReport r = profile_backend(sim, o);
  ASSERT_TRUE(r.lora);
  EXPECT_EQ(r.lora->rank, 4);
  // Decodes of 1, 16 and 64 (16 and 64 also over 8 adapters), prefills of 64 and 512, 16 x 128 over 1 and 8.
  EXPECT_EQ(r.lora->points.size(), 5u + 2u + 2u);
  for (const LoraProfilePoint& p : r.lora->points)
    EXPECT_NEAR(p.lora_s - p.base_s, lora_point_seconds(truth, m, r.lora->params, p), 1e-12) << p.rows << " rows";
  r.hardware = "h200";
  const std::string text = profile_json(r);
  const nlohmann::json j = nlohmann::json::parse(text);
  ASSERT_TRUE(j.contains("lora"));
  EXPECT_NEAR(j["lora"]["fit"]["decode_row_s"].get<double>(), 2.0e-6, 1e-12);
  ASSERT_EQ(j["lora"]["fit"]["decode_knots"].size(), 3u);  // 1, 16 and 64 rows
  EXPECT_NEAR(j["lora"]["fit"]["decode_knots"][1]["layer_s"].get<double>(), 16 * 2.0e-6, 1e-12);
  profile_fixture::TempFile file(text);
  const SimCostModel cost = SimCostModel::from_profile_json(file.path(), m);
  EXPECT_TRUE(cost.lora_measured);
  EXPECT_NE(cost.source.find("LoRA measured"), std::string::npos);
  EXPECT_NEAR(cost.device.lora_decode_row_s, truth.lora_decode_row_s, 1e-6 * truth.lora_decode_row_s);
  EXPECT_NEAR(cost.device.lora_prefill_run_s, truth.lora_prefill_run_s, 1e-6 * truth.lora_prefill_run_s);
  EXPECT_NEAR(cost.device.lora_bandwidth_share, truth.lora_bandwidth_share, 1e-6);
  // Without the points the preset's figures stay.
  nlohmann::json plain = j;
  plain.erase("lora");
  profile_fixture::TempFile plain_file(plain.dump());
  const SimCostModel preset_cost = SimCostModel::from_profile_json(plain_file.path(), m);
  EXPECT_FALSE(preset_cost.lora_measured);
  EXPECT_EQ(preset_cost.device.lora_decode_row_s, SimDevice::preset("h200").lora_decode_row_s);
  // A broken point is refused, naming the file and the field.
  nlohmann::json bad = j;
  bad["lora"]["points"][2].erase("base_s");
  profile_fixture::TempFile bad_file(bad.dump());
  try {
    SimCostModel::from_profile_json(bad_file.path(), m);
    FAIL() << "a point without base_s was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad_file.path()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"lora\".points[2].base_s"), std::string::npos) << e.what();
  }
}

/// A cpu backend that says it runs no adapters (as cuda under tensor parallelism).
class NoLoraBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  BackendCaps caps() const override {
    BackendCaps c = ForwardingBackend::caps();
    c.lora = false;
    return c;
  }
};

TEST(ProfilerLora, TheCpuBackendTimesItsAdaptersAndABackendWithoutThemIsRefused) {
  const ModelConfig c = testing::small_config(2);
  CpuBackend cpu(ModelWeights::random(c, 5), CpuBackendOptions{.n_threads = 1});
  ProfileOptions o = lora_options();
  o.repeats = 1;
  const ProfileReport r = profile_backend(cpu, o);
  ASSERT_TRUE(r.lora);
  ASSERT_EQ(r.lora->points.size(), lora_profile_grid(o).size());
  for (const LoraProfilePoint& p : r.lora->points) {
    EXPECT_GT(p.base_s, 0.0);
    EXPECT_GT(p.lora_s, 0.0);
  }
  LoraAdapter shape;
  shape.rank = 4;
  shape.targets.fill(true);
  EXPECT_EQ(r.lora->params, lora_params(c, &shape));
  // The JSON round trip keeps every point.
  const LoraProfile back = lora_profile_from_json(lora_profile_json(*r.lora, c, "cpu-2core"));
  ASSERT_EQ(back.points.size(), r.lora->points.size());
  EXPECT_EQ(back.points[3].adapters, r.lora->points[3].adapters);
  EXPECT_DOUBLE_EQ(back.points[3].lora_s, r.lora->points[3].lora_s);
  EXPECT_NE(lora_profile_table(*r.lora, c, "cpu-2core").find("sim's LoRA fit"), std::string::npos);

  NoLoraBackend refusing(std::make_unique<CpuBackend>(ModelWeights::random(c, 5), CpuBackendOptions{.n_threads = 1}));
  try {
    profile_backend(refusing, o);
    FAIL() << "a backend without adapters was profiled with them";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not run LoRA adapters"), std::string::npos) << e.what();
  }
}

}  // namespace profiler_lora_test
}  // namespace servelab
