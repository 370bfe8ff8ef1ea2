#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/profiler.h"
#include "engine/backend/sim_backend.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

ProfileOptions small_options() {
  ProfileOptions o;
  o.batch_sizes = {3, 1};
  o.prompt_len = 6;
  o.decode_steps = 4;
  o.min_prefill_s = 0.0;  // one timed prefill per batch size
  return o;
}

TEST(Profiler, TimesPrefillAndDecodeAtEachBatchSize) {
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  const ProfileReport r = profile_backend(backend, small_options());
  EXPECT_EQ(r.backend, "cpu");
  EXPECT_EQ(r.kv_dtype_bytes, 4);
  ASSERT_EQ(r.figures.size(), 4u);  // prefill 1, prefill 3, decode 1, decode 3
  EXPECT_EQ(r.figures[0].phase, ProfilePhase::prefill);
  EXPECT_EQ(r.figures[0].batch_size, 1);
  EXPECT_EQ(r.figures[1].n_tokens, 18);
  EXPECT_EQ(r.figures[3].phase, ProfilePhase::decode);
  EXPECT_EQ(r.figures[3].batch_size, 3);
  EXPECT_EQ(r.figures[3].context, 6);
  EXPECT_EQ(r.figures[3].n_steps, 4);
  for (const ProfileFigure& f : r.figures) {
    EXPECT_GT(f.median_step_s, 0.0);
    EXPECT_NEAR(f.tokens_per_s, f.n_tokens / f.median_step_s, 1e-6 * f.tokens_per_s);
  }
  ASSERT_EQ(r.samples.size(), 10u);  // 1 + 4 decode steps, per batch size
  // Decode at batch 3: each step adds one token per sequence to contexts that start at 7.
  int i = 0;
  for (const ProfileSample& s : r.samples) {
    if (s.phase != ProfilePhase::decode || s.batch_size != 3) continue;
    EXPECT_EQ(s.n_tokens, 3);
    EXPECT_EQ(s.n_sampled, 3);
    EXPECT_EQ(s.sum_context, 3 * (7 + i));
    ++i;
  }
  EXPECT_EQ(i, 4);
  EXPECT_NE(profile_table(r).find("decode"), std::string::npos);
}

TEST(Profiler, JsonCarriesTheSamplesTheSimCostModelFits) {
  CpuBackend backend(ModelWeights::random(testing::small_config(4), 2), CpuBackendOptions{.n_threads = 1});
  ProfileReport r = profile_backend(backend, small_options());
  r.device = "test";
  const std::string text = profile_json(r);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("schema"), "servelab.profile/1");
  EXPECT_EQ(j.at("samples").size(), r.samples.size());
  EXPECT_EQ(j.at("samples")[0].at("phase"), "prefill");
  EXPECT_TRUE(j.at("samples")[0].contains("sum_context"));
  EXPECT_EQ(j.at("model").at("n_kv_heads"), 4);

  const auto path = std::filesystem::temp_directory_path() / "servelab_profiler_test.json";
  std::ofstream(path) << text;
  const SimCostModel cost = SimCostModel::from_profile_json(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(cost.kind, SimCostModel::Kind::linear);
}

TEST(Profiler, RejectsOptionsTheModelCannotRun) {
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  ProfileOptions o = small_options();
  o.prompt_len = 600;  // max_position is 512
  EXPECT_THROW(profile_backend(backend, o), std::invalid_argument);
  o = small_options();
  o.batch_sizes = {0};
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.batch_sizes = {};
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
