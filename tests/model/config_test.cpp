#include <cmath>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "engine/model/config.h"

namespace servelab {
namespace {

std::string validate_error(const ModelConfig& c) {
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, EveryPresetValidates) {
  for (const std::string& name : preset_names()) {
    const ModelConfig c = preset(name);
    EXPECT_EQ(c.name, name);
    EXPECT_NO_THROW(c.validate()) << name;
    EXPECT_EQ(c.hidden_size % c.n_heads, 0) << name;
  }
  EXPECT_EQ(preset_names().size(), 8u);  // seven shapes of public models and copy-tiny
}

TEST(ModelConfig, ParameterCountsMatchPublishedModels) {
  auto near = [](const std::string& name, double expected) {
    const double n = static_cast<double>(preset(name).n_params());
    EXPECT_LT(std::abs(n - expected) / expected, 0.01) << name << " has " << n << " parameters";
  };
  near("llama2-7b", 6.74e9);
  near("llama3-8b", 8.03e9);
  near("llama2-13b", 13.0e9);
  near("llama3-70b", 70.6e9);
  near("llama3.2-1b", 1.24e9);
  near("qwen2.5-0.5b", 0.494e9);
  const int64_t tiny = preset("tiny").n_params();
  EXPECT_GT(tiny, 3'000'000);
  EXPECT_LT(tiny, 5'000'000);
}

TEST(ModelConfig, ExactCountForTinyShape) {
  ModelConfig c = preset("tiny");
  // embeddings 2048*256, lm_head 2048*256, final norm 256, and per layer
  // q 256*256 + k,v 2*64*256 + o 256*256 + ffn 3*704*256 + norms 2*256.
  const int64_t per_layer = 65536 + 2 * 16384 + 65536 + 3 * 704 * 256 + 512;
  EXPECT_EQ(c.n_params(), 2 * 2048 * 256 + 256 + 4 * per_layer);
  c.tie_embeddings = true;
  EXPECT_EQ(c.n_params(), 2048 * 256 + 256 + 4 * per_layer);
  c.attention_bias = true;
  EXPECT_EQ(c.n_params(), 2048 * 256 + 256 + 4 * (per_layer + 256 + 64 + 64));
}

TEST(ModelConfig, GqaShapesOfPresets) {
  const ModelConfig t = preset("tiny");
  EXPECT_EQ(t.head_dim(), 32);
  EXPECT_EQ(t.kv_dim(), 64);
  const ModelConfig q = preset("qwen2.5-0.5b");
  EXPECT_EQ(q.head_dim(), 64);
  EXPECT_TRUE(q.attention_bias);
  EXPECT_TRUE(q.tie_embeddings);
  EXPECT_EQ(preset("llama3-70b").kv_dim(), 1024);
}

TEST(ModelConfig, UnknownPresetListsNames) {
  try {
    preset("llama9");
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("llama9"), std::string::npos) << msg;
    EXPECT_NE(msg.find("qwen2.5-0.5b"), std::string::npos) << msg;
  }
}

TEST(ModelConfig, ValidateNamesTheField) {
  ModelConfig c = preset("tiny");
  c.n_heads = 7;
  EXPECT_EQ(validate_error(c), "n_heads (7) must divide hidden_size (256)");
  c = preset("tiny");
  c.n_kv_heads = 3;
  EXPECT_EQ(validate_error(c), "n_kv_heads (3) must divide n_heads (8)");
  c = preset("tiny");
  c.hidden_size = 0;
  EXPECT_NE(validate_error(c).find("hidden_size (0)"), std::string::npos);
  c = preset("tiny");
  c.vocab_size = -4;
  EXPECT_NE(validate_error(c).find("vocab_size (-4)"), std::string::npos);
  c = preset("tiny");
  c.rms_eps = 0.0f;
  EXPECT_NE(validate_error(c).find("rms_eps"), std::string::npos);
  c = preset("tiny");
  c.rope_theta = -1.0f;
  EXPECT_NE(validate_error(c).find("rope_theta"), std::string::npos);
  c = preset("tiny");
  c.eos_token = 5000;
  EXPECT_NE(validate_error(c).find("eos_token (5000)"), std::string::npos);
  c = preset("tiny");
  c.n_heads = 256;  // head_dim 1: RoPE needs pairs
  c.n_kv_heads = 256;
  EXPECT_NE(validate_error(c).find("head_dim"), std::string::npos);
}

TEST(ModelConfig, ParseDtype) {
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("f16"), DType::f16);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_THROW(parse_dtype("int8"), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
