// Scenario keys that reach the engine's weights and mask path: model.residual_scale (synthesized
// weights for speculative decoding) and engine.structured_output, each read, carried into the
// backend spec or engine config, and checked with file:line errors.
#include <gtest/gtest.h>

#include <string>

#include "loadgen/backend_spec.h"
#include "loadgen/scenario.h"
#include "loadgen/sources.h"
#include "loadgen_test_util.h"

namespace servelab {
namespace scenario_engine_keys_test {  // named, not anonymous: a unity batch shares one translation unit

using testing_util::load_yaml;
using testing_util::scenario_errors;

/// The only error of `yaml`, or a failure listing them.
std::string sole_error(const std::string& yaml) {
  const auto errs = scenario_errors(yaml);
  std::string all;
  for (const auto& e : errs) all += e + "\n";
  EXPECT_EQ(errs.size(), 1u) << all;
  return errs.empty() ? "" : errs[0];
}

TEST(ScenarioErrors, EngineStructuredOutputIsReadAndChecked) {
  const Scenario sc = load_yaml("engine: {structured_output: {overlap_masks: false, jump_forward: true}}\n"
                                "strategies: [{batching: continuous}]\n"
                                "workload: {rates: [1]}\n");
  EXPECT_FALSE(sc.engine.structured_output.overlap_masks);
  EXPECT_TRUE(sc.engine.structured_output.jump_forward);
  EXPECT_TRUE(engine_config(sc, sc.strategies[0]).structured_output.jump_forward);
  EXPECT_NE(sole_error("engine: {structured_output: {jump_forward: true}}\n"
                       "strategies: [{batching: static}]\n"
                       "workload: {rates: [1]}\n")
                .find("scn.yaml:1:44: engine.structured_output.jump_forward needs continuous batching in every strategy (static-paged is static)"),
            std::string::npos);
  EXPECT_NE(sole_error("engine: {structured_output: {jump: true}}\n"
                       "strategies: [{batching: continuous}]\n"
                       "workload: {rates: [1]}\n")
                .find("unknown key 'jump' in engine.structured_output"),
            std::string::npos);
}

TEST(ScenarioErrors, ResidualScaleIsReadAndChecked) {
  const Scenario sc = load_yaml("model: {preset: tiny, residual_scale: {from_layer: 2, scale: 0.1}}\n"
                                "strategies: [{batching: continuous}]\n"
                                "workload: {rates: [1]}\n");
  ASSERT_TRUE(sc.model.residual_scale.has_value());
  EXPECT_EQ(sc.model.residual_scale->from_layer, 2);
  EXPECT_FLOAT_EQ(sc.model.residual_scale->scale, 0.1f);
  EXPECT_EQ(backend_spec(sc).residual_scale, sc.model.residual_scale);
  EXPECT_NE(sole_error("model: {preset: tiny, residual_scale: {from_layer: 9, scale: 0.1}}\n"
                       "strategies: [{batching: continuous}]\n"
                       "workload: {rates: [1]}\n")
                .find("scn.yaml:1:52: model.residual_scale.from_layer must be at most the model's 4 layers (got 9)"),
            std::string::npos);
  EXPECT_NE(sole_error("model: {preset: tiny, residual_scale: {scale: 0.1}}\n"
                       "strategies: [{batching: continuous}]\n"
                       "workload: {rates: [1]}\n")
                .find("scn.yaml:1:39: model.residual_scale needs from_layer and scale"),
            std::string::npos);
  EXPECT_NE(sole_error("model: {preset: tiny, residual_scale: {from_layer: 1, scale: .nan}}\n"
                       "strategies: [{batching: continuous}]\n"
                       "workload: {rates: [1]}\n")
                .find("scn.yaml:1:62: model.residual_scale.scale must be a number (got '.nan')"),
            std::string::npos);
}

}  // namespace scenario_engine_keys_test
}  // namespace servelab
