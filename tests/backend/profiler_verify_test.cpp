// Verification points of `servelab profile --verify-k` (engine/backend/profiler.h) on the CPU
// engine, the profile's "draft" section, and what the sim reads back from them: the verification
// term of the cost model and the draft's own step prices (engine/backend/draft_pricer.h).
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/draft_pricer.h"
#include "engine/backend/profiler.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace profiler_verify_test {  // named, not anonymous: a unity batch shares one translation unit

ProfileOptions verify_options() {
  ProfileOptions o;
  o.prefill_lens = {4, 8};
  o.batch_sizes = {1, 3};
  o.contexts = {6, 12};
  o.prompt_lens = {6};
  o.chunk_lens = {3, 5};
  o.repeats = 1;
  o.verify_ks = {2};
  return o;
}

TEST(ProfilerVerify, EachSequenceScoresKPlus1DrawnRowsAtTheGridsBatchesAndContexts) {
  CpuBackend backend(ModelWeights::random(testing::small_config(2), 1), CpuBackendOptions{.n_threads = 1});
  const ProfileReport r = profile_backend(backend, verify_options());
  int n_verify = 0;
  for (const ProfileSample& s : r.samples) {
    if (s.phase != ProfilePhase::verify) {
      EXPECT_EQ(s.shape.verify_rows, 0) << "only verification points draw every row";
      continue;
    }
    ++n_verify;
    EXPECT_EQ(s.shape.n_tokens, 3 * s.shape.n_seqs);
    EXPECT_EQ(s.shape.n_sampled, s.shape.n_tokens);  // the last token and 2 drafts, each drawn
    EXPECT_EQ(s.shape.verify_rows, s.shape.n_tokens);
    EXPECT_DOUBLE_EQ(s.shape.verify_pairs, s.shape.prefill_pairs);
    const int context = int(s.shape.max_context) - 3;
    EXPECT_TRUE(context == 6 || context == 12) << context;
    EXPECT_DOUBLE_EQ(s.shape.verify_pairs, s.shape.n_seqs * (3.0 * context + 6.0));  // rows attend to context + 1..3
    EXPECT_GT(s.step_s, 0.0);
  }
  EXPECT_EQ(n_verify, 2 * 2);  // batches {1, 3} × contexts {6, 12}
}

TEST(ProfilerVerify, TheSimReadsVerificationPointsAndTheDraftsOwnProfile) {
  const ModelConfig target_config = testing::small_config(2);
  ModelConfig draft_config = target_config;
  draft_config.n_layers = 1;
  CpuBackend target(ModelWeights::random(target_config, 1), CpuBackendOptions{.n_threads = 1});
  CpuBackend draft(ModelWeights::random(draft_config, 1), CpuBackendOptions{.n_threads = 1});
  ProfileReport r = profile_backend(target, verify_options());
  ProfileOptions draft_grid = verify_options();
  draft_grid.verify_ks.clear();
  ProfileReport d = profile_backend(draft, draft_grid);
  r.hardware = d.hardware = "cpu-2core";
  const std::string text = profile_json(r, &d);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("options").at("verify_ks"), nlohmann::json::array({2}));
  EXPECT_EQ(j.at("draft").at("model").at("n_layers"), 1);
  EXPECT_EQ(j.at("draft").at("model").at("shape_hash"), model_shape_hash(draft_config));

  const auto path = std::filesystem::temp_directory_path() / "servelab_profiler_verify_test.json";
  std::ofstream(path) << text;
  const SimCostModel cost = SimCostModel::from_profile_json(path.string(), r.model);
  ASSERT_TRUE(cost.profiled);
  EXPECT_TRUE(cost.profiled->has_verification());
  ASSERT_EQ(cost.draft_profiles.size(), 1u);
  EXPECT_EQ(cost.draft_profiles[0].shape_hash, model_shape_hash(draft_config));
  // A draft of that shape is priced from its own profile: exactly what that profile's fit says.
  const DraftPricer own(cost, target_config, draft_config);
  EXPECT_TRUE(own.draft_profiled());
  for (const ProfileSample& s : d.samples)
    EXPECT_DOUBLE_EQ(own.seconds(s.shape), cost.draft_profiles[0].profiled.predict_clamped(s.shape));
  // A draft of another shape falls back to the target's profile times the roofline ratio.
  ModelConfig other = draft_config;
  other.intermediate_size = 64;
  EXPECT_FALSE(DraftPricer(cost, target_config, other).draft_profiled());

  // The profile without its new parts still loads (older files): no verification term, no draft.
  auto old = j;
  old.erase("draft");
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& s : old.at("samples"))
    if (!s.contains("verify_rows")) kept.push_back(s);
  old["samples"] = kept;
  std::ofstream(path) << old.dump();
  const SimCostModel plain = SimCostModel::from_profile_json(path.string(), r.model);
  EXPECT_FALSE(plain.profiled->has_verification());
  EXPECT_TRUE(plain.draft_profiles.empty());
  EXPECT_FALSE(DraftPricer(plain, target_config, draft_config).draft_profiled());

  // A draft profiled on another device is refused, naming both.
  auto moved = j;
  moved["draft"]["hardware"] = "h100";
  std::ofstream(path) << moved.dump();
  try {
    SimCostModel::from_profile_json(path.string(), r.model);
    ADD_FAILURE() << "a draft profiled elsewhere was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("h100"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace profiler_verify_test
}  // namespace servelab
