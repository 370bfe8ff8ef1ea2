// The profile grid taken from a scenario (loadgen/profile_grid_for.h): knots at its planned
// requests' prompt and context quantiles, batches up to its strategies' largest, chunks capped at
// its chunked-prefill budget.
#include "loadgen/profile_grid_for.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace servelab {
namespace profile_grid_for_test {  // named, not anonymous: a unity batch shares one translation unit

Scenario scenario(const std::string& strategies, const std::string& lengths) {
  return load_scenario_text("name: g\nseed: 4\nmodel: {preset: tiny}\nbackend: {kind: sim, sim_device: cpu-2core}\n"
                            "engine: {kv_cache_mb: 64, max_model_len: 1024}\nstrategies:\n" +
                                strategies + "workload:\n  rates: [5]\n  n_requests: 200\n" + lengths,
                            "g.yaml");
}

bool sorted_unique_positive(const std::vector<int>& v) {
  return !v.empty() && std::is_sorted(v.begin(), v.end()) && std::adjacent_find(v.begin(), v.end()) == v.end() &&
         v.front() >= 1;
}

TEST(ProfileGridFor, FixedLengthsGiveSingleKnotsAndBatchesUpToTheLargestStrategy) {
  const Scenario sc = scenario("  - {label: a, batching: continuous, max_num_seqs: 40}\n"
                               "  - {label: b, batching: static, batch_size: 8}\n",
                               "  prompt_tokens: {dist: fixed, value: 100}\n  output_tokens: {dist: fixed, value: 50}\n");
  const ScenarioGrid g = profile_grid_for(sc, ProfileOptions{});
  EXPECT_EQ(g.grid.prefill_lens, (std::vector<int>{100}));
  EXPECT_EQ(g.grid.prompt_lens, (std::vector<int>{100}));
  EXPECT_EQ(g.grid.contexts, (std::vector<int>{125, 150}));  // prompt + output / 2, and the longest
  EXPECT_EQ(g.grid.batch_sizes, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 32, 40}));
  EXPECT_EQ(g.grid.chunk_lens, (std::vector<int>{100}));
  EXPECT_EQ(g.grid.max_rows, 40 * 100);
  EXPECT_EQ(g.notes.size(), 6u);
  EXPECT_NO_THROW(g.grid.validate());
  EXPECT_EQ(g.grid.repeats, ProfileOptions{}.repeats) << "what the scenario does not say comes from the base";
}

TEST(ProfileGridFor, SpreadLengthsGiveQuantilesAndChunksCappedAtTheBudget) {
  const Scenario sc = scenario("  - {label: c, batching: continuous, max_num_seqs: 8, max_num_batched_tokens: 256, "
                               "chunked_prefill: true}\n",
                               "  prompt_tokens: {dist: uniform, min: 20, max: 900}\n"
                               "  output_tokens: {dist: uniform, min: 10, max: 100}\n");
  const ScenarioGrid g = profile_grid_for(sc, ProfileOptions{});
  for (const auto* v : {&g.grid.prefill_lens, &g.grid.contexts, &g.grid.batch_sizes, &g.grid.chunk_lens, &g.grid.prompt_lens})
    EXPECT_TRUE(sorted_unique_positive(*v));
  ASSERT_GE(g.grid.prefill_lens.size(), 5u);
  EXPECT_GE(g.grid.prefill_lens.front(), 20);
  EXPECT_LE(g.grid.prefill_lens.front(), 60) << "the shortest prompts";
  EXPECT_LE(g.grid.prefill_lens.back(), 900);
  EXPECT_GE(g.grid.prefill_lens.back(), 850) << "the longest prompt";
  EXPECT_EQ(g.grid.batch_sizes.back(), 8);
  EXPECT_EQ(g.grid.chunk_lens.back(), 256) << "prompts longer than the budget run in 256-token chunks";
  for (int c : g.grid.chunk_lens) EXPECT_LE(c, 256);
  // Their last chunks (a prompt's length mod 256, 1-255) are measured too: three quartiles below
  // the chunk, the first a short one (without them: one knot, 256).
  EXPECT_GE(std::count_if(g.grid.chunk_lens.begin(), g.grid.chunk_lens.end(), [](int c) { return c < 256; }), 3)
      << testing::PrintToString(g.grid.chunk_lens);
  EXPECT_LT(g.grid.chunk_lens.front(), 100) << testing::PrintToString(g.grid.chunk_lens);
  EXPECT_LE(g.grid.contexts.back(), 1000);
  EXPECT_GT(g.grid.contexts.back(), g.grid.prefill_lens.back()) << "the longest prompt + output";
  EXPECT_NO_THROW(g.grid.validate());
}

// Sequences that reach the max length with chunked prefill: the grid's longest context + a whole
// chunk would pass it (the 13b long-prompt matrix cell's profile failed so). Chunk and
// verification points there start earlier; decodes run up to the last step's context.
TEST(ProfileGridFor, ChunksNearTheMaxLengthStartEarlierAndTheGridFits) {
  const Scenario sc = scenario("  - label: c\n    batching: continuous\n    max_num_seqs: 8\n"
                               "    max_num_batched_tokens: 256\n    chunked_prefill: true\n"
                               "    speculative: {method: ngram, num_speculative_tokens: 4}\n",
                               "  prompt_tokens: {dist: uniform, min: 600, max: 900}\n"
                               "  output_tokens: {dist: fixed, value: 124}\n");
  const ScenarioGrid g = profile_grid_for(sc, ProfileOptions{});
  EXPECT_EQ(g.grid.max_len, 1024);
  ASSERT_GE(g.grid.contexts.back(), 1000) << "the longest prompt + output";
  ModelConfig model = preset("tiny");
  model.max_position = 1024;
  EXPECT_NO_THROW(g.grid.check_fits(model));
  int chunk_at_end = 0, decode_at_longest = 0;
  for (const ProfilePoint& p : profile_grid(g.grid)) {
    EXPECT_LE(p.max_len(), 1024);
    if (p.phase == ProfilePhase::chunk && p.seqs[0].n_new == 256 && p.seqs[0].context == 1024 - 256) ++chunk_at_end;
    if (p.phase == ProfilePhase::decode && p.seqs[0].context == 1023) ++decode_at_longest;
  }
  EXPECT_EQ(chunk_at_end, 1) << "one 256-row chunk ending at the max length, not one per clamped context";
  EXPECT_GT(decode_at_longest, 0);
  ProfileOptions uncapped = g.grid;
  uncapped.max_len = 0;
  EXPECT_THROW(uncapped.check_fits(model), std::invalid_argument) << "without the cap the grid does not fit";
  uncapped.max_len = -1;
  EXPECT_THROW(uncapped.validate(), std::invalid_argument) << "a negative cap is an error";
}

TEST(ProfileGridFor, SpeculatingStrategiesAddVerificationPointsAndTheirDraft) {
  const Scenario sc = scenario(
      "  - {label: plain, batching: continuous, max_num_seqs: 8}\n"
      "  - label: self\n    batching: continuous\n    max_num_seqs: 8\n"
      "    speculative: {method: self, num_layers: 1, num_speculative_tokens: 3, adaptive: false,"
      " sim_acceptance: {per_position: [0.8, 0.7, 0.6]}}\n"
      "  - label: ngram\n    batching: continuous\n    max_num_seqs: 8\n"
      "    speculative: {method: ngram, num_speculative_tokens: 5}\n",
      "  prompt_tokens: {dist: fixed, value: 100}\n  output_tokens: {dist: fixed, value: 50}\n");
  const ScenarioGrid g = profile_grid_for(sc, ProfileOptions{});
  // self: k = 3 fixed; ngram: adaptive k from 1 to 5.
  EXPECT_EQ(g.grid.verify_ks, (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(g.draft_layers, 1);
  EXPECT_TRUE(g.draft_preset.empty());
  EXPECT_NO_THROW(g.grid.validate());
  const Scenario plain = scenario("  - {label: a, batching: continuous, max_num_seqs: 8}\n",
                                  "  prompt_tokens: {dist: fixed, value: 100}\n  output_tokens: {dist: fixed, value: 50}\n");
  EXPECT_TRUE(profile_grid_for(plain, ProfileOptions{}).grid.verify_ks.empty());
  EXPECT_EQ(profile_grid_for(plain, ProfileOptions{}).draft_layers, 0);
}

}  // namespace profile_grid_for_test
}  // namespace servelab
