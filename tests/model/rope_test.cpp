// RoPE inverse frequencies, plain and with Llama 3's rope_scaling, against values worked out by
// hand from the Hugging Face formula (_compute_llama3_parameters).
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/config.h"

namespace servelab {
namespace {

/// head_dim 8, theta 10^4: unscaled inv_freq = 1, 0.1, 0.01, 0.001; wavelengths 2π/f =
/// 6.28, 62.8, 628, 6283.
ModelConfig head_dim_8() {
  ModelConfig c = preset("tiny");
  c.hidden_size = 64;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.rope_theta = 10000.0f;
  return c;
}

TEST(Rope, UnscaledFrequenciesArePowersOfTheta) {
  const std::vector<double> f = rope_inv_freq(head_dim_8());
  ASSERT_EQ(f.size(), 4u);
  const double expected[] = {1.0, 0.1, 0.01, 0.001};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], expected[i], 1e-15) << i;
}

TEST(Rope, Llama3ScalingKeepsHighDividesLowAndSmoothsBetween) {
  ModelConfig c = head_dim_8();
  // original 1024, low 1, high 4: wavelengths < 256 are kept, > 1024 divided by 8, between smoothed.
  c.rope_scaling = {.type = RopeScaling::Type::llama3, .factor = 8.0f, .low_freq_factor = 1.0f,
                    .high_freq_factor = 4.0f, .original_max_position = 1024};
  const std::vector<double> f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_NEAR(f[0], 1.0, 1e-15);   // wavelength 6.28 < 256
  EXPECT_NEAR(f[1], 0.1, 1e-15);   // 62.8 < 256
  // 628.3 in [256, 1024]: smooth = (1024 / 628.3185 - 1) / (4 - 1) = 0.2099155;
  // f = 0.01 · ((1 - smooth) / 8 + smooth) = 0.0030867610.
  EXPECT_NEAR(f[2], 0.00308676096701, 1e-13);
  EXPECT_NEAR(f[3], 0.001 / 8, 1e-15);  // 6283 > 1024
}

TEST(Rope, Llama32PresetCarriesItsScaling) {
  const ModelConfig c = preset("llama3.2-1b");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  // head_dim 64: the first pair turns fastest and is kept; the last (wavelength ~ 2.3M) is /32.
  const std::vector<double> f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 32u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  ModelConfig plain = c;
  plain.rope_scaling = {};
  EXPECT_NEAR(f[31], rope_inv_freq(plain)[31] / 32.0, 1e-18);
  EXPECT_EQ(preset("llama3-8b").rope_scaling.type, RopeScaling::Type::none);  // Llama 3.0: none
}

TEST(Rope, ScalingValidationNamesTheField) {
  auto error_of = [](RopeScaling rs) -> std::string {
    ModelConfig c = preset("tiny");
    c.rope_scaling = rs;
    try {
      c.validate();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  const RopeScaling ok{.type = RopeScaling::Type::llama3, .factor = 8.0f};
  EXPECT_EQ(error_of(ok), "");
  RopeScaling bad = ok;
  bad.factor = 0.5f;
  EXPECT_NE(error_of(bad).find("rope_scaling.factor"), std::string::npos);
  bad = ok;
  bad.low_freq_factor = 0.0f;
  EXPECT_NE(error_of(bad).find("rope_scaling.low_freq_factor"), std::string::npos);
  bad = ok;
  bad.high_freq_factor = 1.0f;  // must exceed low_freq_factor (1)
  EXPECT_NE(error_of(bad).find("rope_scaling.high_freq_factor"), std::string::npos);
  bad = ok;
  bad.original_max_position = 0;
  EXPECT_NE(error_of(bad).find("rope_scaling.original_max_position"), std::string::npos);
}

}  // namespace
}  // namespace servelab
