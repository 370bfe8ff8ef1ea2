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
  o.prefill_lens = {4, 8};
  o.batch_sizes = {1, 3};
  o.contexts = {6, 12};
  o.prompt_len = 6;
  o.chunk_lens = {5};
  o.repeats = 2;
  o.min_point_s = 1e9;  // always both repeats
  return o;
}

TEST(Profiler, TimesEveryPointOfTheGrid) {
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  const ProfileReport r = profile_backend(backend, small_options());
  EXPECT_EQ(r.backend, "cpu");
  EXPECT_EQ(r.kv_dtype_bytes, 4);
  // prefill 4, 8; batched prefill 3 × 6; decode {1,3} × {6,12}; chunk 5 at {6,12}; mixed at batch 3 (and 1? no: middle = 3 = max)
  ASSERT_EQ(r.samples.size(), 2u + 1u + 4u + 2u + 1u);
  EXPECT_EQ(r.samples[0].phase, ProfilePhase::prefill);
  EXPECT_EQ(r.samples[0].shape.n_tokens, 4);
  EXPECT_DOUBLE_EQ(r.samples[0].shape.prefill_pairs, 10.0);  // 1 + 2 + 3 + 4
  EXPECT_EQ(r.samples[2].shape.n_seqs, 3);
  EXPECT_EQ(r.samples[2].shape.n_tokens, 18);
  const ProfileSample& d = r.samples[6];  // decode, batch 3, context 12
  EXPECT_EQ(d.phase, ProfilePhase::decode);
  EXPECT_EQ(d.shape.n_tokens, 3);
  EXPECT_EQ(d.shape.n_sampled, 3);
  EXPECT_EQ(d.shape.max_context, 13);
  EXPECT_DOUBLE_EQ(d.shape.decode_context, 39.0);
  const ProfileSample& c = r.samples[7];  // chunk of 5 after 6 cached
  EXPECT_EQ(c.phase, ProfilePhase::chunk);
  EXPECT_DOUBLE_EQ(c.shape.prefill_pairs, 5.0 * 6 + 15);
  const ProfileSample& m = r.samples.back();
  EXPECT_EQ(m.phase, ProfilePhase::mixed);
  EXPECT_EQ(m.shape.n_seqs, 4);
  EXPECT_EQ(m.shape.n_tokens, 3 + 5);
  for (const ProfileSample& s : r.samples) {
    EXPECT_EQ(s.times_s.size(), 2u);
    EXPECT_GT(s.step_s, 0.0);
  }
  EXPECT_NE(profile_table(r).find("decode"), std::string::npos);
}

TEST(Profiler, JsonCalibratesTheSimForItsModelOnly) {
  CpuBackend backend(ModelWeights::random(testing::small_config(4), 2), CpuBackendOptions{.n_threads = 1});
  ProfileReport r = profile_backend(backend, small_options());
  r.device = "test";
  r.hardware = "cpu-2core";
  r.commit = "abc";
  const std::string text = profile_json(r);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("schema"), "servelab.profile/2");
  EXPECT_EQ(j.at("samples").size(), r.samples.size());
  EXPECT_EQ(j.at("samples")[0].at("phase"), "prefill");
  EXPECT_EQ(j.at("model").at("n_kv_heads"), 4);
  EXPECT_EQ(j.at("model").at("shape_hash"), model_shape_hash(r.model));
  EXPECT_EQ(j.at("commit"), "abc");

  const auto path = std::filesystem::temp_directory_path() / "servelab_profiler_test.json";
  std::ofstream(path) << text;
  const SimCostModel cost = SimCostModel::from_profile_json(path.string(), r.model);
  EXPECT_EQ(cost.kind, SimCostModel::Kind::profile);
  for (const ProfileSample& s : r.samples) EXPECT_TRUE(cost.profiled->inside(s.shape));
  ModelConfig other = r.model;
  other.intermediate_size += 8;
  EXPECT_THROW(SimCostModel::from_profile_json(path.string(), other), std::runtime_error);
  std::filesystem::remove(path);
}

TEST(Profiler, RejectsOptionsTheModelCannotRun) {
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  ProfileOptions o = small_options();
  o.contexts = {600};  // max_position is 512
  EXPECT_THROW(profile_backend(backend, o), std::invalid_argument);
  o = small_options();
  o.batch_sizes = {0};
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.batch_sizes = {};
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
