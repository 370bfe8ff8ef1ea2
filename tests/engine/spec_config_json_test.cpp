// `servelab serve --speculative-config JSON`: vLLM's keys read into SpeculativeConfig, every
// mistake named.
#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/spec/spec_config.h"

namespace servelab {
namespace {

std::string error_of(const std::string& json) {
  try {
    speculative_config_from_json(json);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(SpecConfigJson, ReadsVllmKeys) {
  const SpeculativeConfig c = speculative_config_from_json(
      R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2, "prompt_lookup_max": 4})");
  EXPECT_EQ(c.method, SpecMethod::ngram);
  EXPECT_EQ(c.num_speculative_tokens, 5);
  EXPECT_EQ(c.prompt_lookup_min, 2);
  EXPECT_EQ(c.prompt_lookup_max, 4);
  EXPECT_TRUE(c.adaptive);
  const SpeculativeConfig s = speculative_config_from_json(R"({"method": "self", "num_layers": 1, "adaptive": false})");
  EXPECT_EQ(s.method, SpecMethod::self);
  EXPECT_EQ(s.num_layers, 1);
  EXPECT_FALSE(s.adaptive);
  // A model without a method is a draft model, as vLLM reads it.
  EXPECT_EQ(speculative_config_from_json(R"({"model": "tiny"})").method, SpecMethod::draft_model);
}

TEST(SpecConfigJson, NamesEachMistake) {
  EXPECT_NE(error_of("{method: ngram}").find("is not JSON"), std::string::npos);
  EXPECT_NE(error_of("[1]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"method": "eagle"})").find("method eagle is not supported"), std::string::npos);
  EXPECT_NE(error_of(R"({"num_speculative_tokens": "3"})").find("num_speculative_tokens must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 40})").find("[1, 16]"), std::string::npos);
  EXPECT_NE(error_of(R"({"lookahead": 3})").find("unknown key lookahead"), std::string::npos);
  EXPECT_NE(error_of(R"({"method": "self"})").find("num_layers must be >= 1"), std::string::npos);
  EXPECT_NE(error_of(R"({"adaptive": 1})").find("adaptive must be true or false"), std::string::npos);
}

TEST(SpecConfigJson, SimAcceptanceForServeOnTheSim) {
  const SpeculativeConfig c = speculative_config_from_json(
      R"({"method": "self", "num_layers": 1, "num_speculative_tokens": 2, "sim_acceptance": {"per_position": [0.9, 0.5]}})");
  ASSERT_TRUE(c.sim_acceptance);
  EXPECT_EQ(c.sim_acceptance->per_position, (std::vector<double>{0.9, 0.5}));
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 3, "sim_acceptance": {"per_position": [0.9, 0.5]}})")
                .find("sim_acceptance.per_position needs one entry per draft position, 3"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"sim_acceptance": {"per_position": [1.5]}})").find("sim_acceptance.per_position"), std::string::npos);
  EXPECT_NE(error_of(R"({"sim_acceptance": {"rate": 0.5}})").find("sim_acceptance must be"), std::string::npos);
  EXPECT_NE(error_of(R"({"sim_acceptance": {"summary": "/no/such/summary.json"}})").find("sim_acceptance.summary"),
            std::string::npos);
}

TEST(SpecConfigJson, SimAcceptanceTakesTheRequestsSpread) {
  // Two kinds of request, one rejecting far more than the other, 40 of each (k_max 2).
  const std::string path = ::testing::TempDir() + "spec_config_json_requests.json";
  {
    std::ofstream f(path);
    f << R"({"k_max": 2, "requests": [)";
    for (int i = 0; i < 80; ++i)
      f << (i ? "," : "")
        << (i % 2 ? R"({"tried_per_pos": [100, 95], "accepted_per_pos": [95, 90], "output_tokens": 256})"
                  : R"({"tried_per_pos": [150, 60], "accepted_per_pos": [60, 30], "output_tokens": 256})");
    f << "]}";
  }
  const SpeculativeConfig c = speculative_config_from_json(
      R"({"method": "self", "num_layers": 1, "num_speculative_tokens": 2, "sim_acceptance": {"per_position": [0.7, 0.6], "requests": ")" +
      path + R"("}})");
  ASSERT_TRUE(c.sim_acceptance);
  ASSERT_EQ(c.sim_acceptance->request_scale.size(), 80u);
  double low = 0.0, high = 0.0;  // the requests that rejected more draw the larger scales
  for (size_t i = 0; i < 80; ++i) (i % 2 ? low : high) += c.sim_acceptance->request_scale[i] / 40.0;
  EXPECT_GT(high, 1.2);
  EXPECT_LT(low, 0.8);
  // As a scenario's `requests:` (the same file and adaptive k): the same scales.
  SimAcceptance same{{0.7, 0.6}, "", {}};
  same.add_request_spread(path, true);
  EXPECT_EQ(c.sim_acceptance->request_scale, same.request_scale);
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 2, "sim_acceptance": {"per_position": [0.7, 0.6], "requests": 3}})")
                .find("sim_acceptance.requests must be a path"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 2, "sim_acceptance": {"per_position": [0.7, 0.6], "requests": "/no/such.json"}})")
                .find("sim_acceptance.requests: /no/such.json: cannot read"),
            std::string::npos);
}

}  // namespace
}  // namespace servelab
