#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "engine/model/hf_config.h"

namespace servelab {
namespace {

// Qwen/Qwen2.5-0.5B's config.json, abridged only of keys servelab ignores.
constexpr const char* kQwenConfig = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

std::string parse_error(const std::string& text) {
  try {
    parse_hf_config(text, "ckpt/config.json");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfig, ParsesQwenAsThePreset) {
  const ModelConfig c = parse_hf_config(kQwenConfig, "config.json");
  const ModelConfig p = preset("qwen2.5-0.5b");
  EXPECT_EQ(c.hidden_size, p.hidden_size);
  EXPECT_EQ(c.n_layers, p.n_layers);
  EXPECT_EQ(c.n_heads, p.n_heads);
  EXPECT_EQ(c.n_kv_heads, p.n_kv_heads);
  EXPECT_EQ(c.intermediate_size, p.intermediate_size);
  EXPECT_EQ(c.vocab_size, p.vocab_size);
  EXPECT_EQ(c.rope_theta, p.rope_theta);
  EXPECT_EQ(c.rms_eps, p.rms_eps);
  EXPECT_EQ(c.max_position, p.max_position);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.dtype, DType::bf16);
  EXPECT_EQ(c.eos_token, 151643);
  EXPECT_EQ(c.n_params(), p.n_params());
}

TEST(HfConfig, DefaultsAndEosList) {
  const ModelConfig c = parse_hf_config(R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "eos_token_id": [7, 9], "dtype": "float16"})", "c.json");
  EXPECT_EQ(c.n_kv_heads, 4);  // absent: MHA
  EXPECT_EQ(c.eos_token, 7);
  EXPECT_EQ(c.dtype, DType::f16);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.rope_theta, 10000.0f);
}

TEST(HfConfig, ReadsTransformers5RopeParameters) {
  // As transformers 5.17 re-saves a config: rope_theta moves into rope_parameters, "dtype" key.
  const ModelConfig c = parse_hf_config(R"({"architectures": ["Qwen2ForCausalLM"], "dtype": "float16",
      "hidden_size": 128, "intermediate_size": 256, "model_type": "qwen2", "num_attention_heads": 4,
      "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
      "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_window": null,
      "tie_word_embeddings": true, "vocab_size": 512, "eos_token_id": 3})", "config.json");
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.dtype, DType::f16);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_NE(parse_error(R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "rope_parameters": {"rope_theta": -1}})").find("rope_theta"),
            std::string::npos);
}

TEST(HfConfig, EveryPresetRoundTrips) {
  for (const std::string& name : preset_names()) {
    const ModelConfig p = preset(name);
    const ModelConfig c = parse_hf_config(hf_config_json(p), "config.json");
    EXPECT_EQ(c.name, p.name);
    EXPECT_EQ(c.hidden_size, p.hidden_size) << name;
    EXPECT_EQ(c.n_layers, p.n_layers) << name;
    EXPECT_EQ(c.n_heads, p.n_heads) << name;
    EXPECT_EQ(c.n_kv_heads, p.n_kv_heads) << name;
    EXPECT_EQ(c.intermediate_size, p.intermediate_size) << name;
    EXPECT_EQ(c.vocab_size, p.vocab_size) << name;
    EXPECT_EQ(c.rope_theta, p.rope_theta) << name;
    EXPECT_EQ(c.rms_eps, p.rms_eps) << name;
    EXPECT_EQ(c.max_position, p.max_position) << name;
    EXPECT_EQ(c.tie_embeddings, p.tie_embeddings) << name;
    EXPECT_EQ(c.attention_bias, p.attention_bias) << name;
    EXPECT_EQ(c.dtype, p.dtype) << name;
    EXPECT_EQ(c.eos_token, p.eos_token) << name;
    EXPECT_EQ(c.rope_scaling.type, p.rope_scaling.type) << name;
    EXPECT_EQ(c.rope_scaling.factor, p.rope_scaling.factor) << name;
    EXPECT_EQ(c.rope_scaling.low_freq_factor, p.rope_scaling.low_freq_factor) << name;
    EXPECT_EQ(c.rope_scaling.high_freq_factor, p.rope_scaling.high_freq_factor) << name;
    EXPECT_EQ(c.rope_scaling.original_max_position, p.rope_scaling.original_max_position) << name;
  }
  const std::string text = hf_config_json(preset("llama3-8b"));
  EXPECT_NE(text.find("\"LlamaForCausalLM\""), std::string::npos);
  EXPECT_NE(text.find("\"rms_norm_eps\": 1e-05"), std::string::npos) << text;
  EXPECT_NE(hf_config_json(preset("qwen2.5-0.5b")).find("\"Qwen2ForCausalLM\""), std::string::npos);
}

TEST(HfConfig, ErrorsNameTheKeyAndFile) {
  const std::string base = R"("num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100)";
  std::string msg = parse_error("{" + base + "}");
  EXPECT_NE(msg.find("ckpt/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing key \"hidden_size\""), std::string::npos) << msg;
  msg = parse_error(R"({"hidden_size": "big", )" + base + "}");
  EXPECT_NE(msg.find("\"hidden_size\" must be a positive integer"), std::string::npos) << msg;
  msg = parse_error(R"({"hidden_size": 64, "num_key_value_heads": 3, )" + base + "}");
  EXPECT_NE(msg.find("n_kv_heads (3) must divide n_heads (4)"), std::string::npos) << msg;
  msg = parse_error(R"({"hidden_size": 64, "torch_dtype": "int4", )" + base + "}");
  EXPECT_NE(msg.find("torch_dtype"), std::string::npos) << msg;
  msg = parse_error(R"({"hidden_size": 64, "model_type": "gpt2", )" + base + "}");
  EXPECT_NE(msg.find("gpt2"), std::string::npos) << msg;
  msg = parse_error(R"({"hidden_size": 64, "head_dim": 32, )" + base + "}");
  EXPECT_NE(msg.find("head_dim"), std::string::npos) << msg;
  msg = parse_error(R"({"hidden_size": 64, "eos_token_id": "x", )" + base + "}");
  EXPECT_NE(msg.find("eos_token_id"), std::string::npos) << msg;
  msg = parse_error("{\"hidden_size\": 64,\n  oops}");
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
}

// meta-llama/Llama-3.2-1B's config.json, abridged only of keys servelab ignores.
constexpr const char* kLlama32Config = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
  "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256})";

TEST(HfConfig, ParsesLlama32WithItsRopeScalingAsThePreset) {
  const ModelConfig c = parse_hf_config(kLlama32Config, "config.json");
  const ModelConfig p = preset("llama3.2-1b");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_EQ(c.rope_scaling.factor, p.rope_scaling.factor);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, p.rope_scaling.low_freq_factor);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, p.rope_scaling.high_freq_factor);
  EXPECT_EQ(c.rope_scaling.original_max_position, p.rope_scaling.original_max_position);
  EXPECT_EQ(rope_inv_freq(c), rope_inv_freq(p));
  EXPECT_EQ(c.n_params(), p.n_params());

  // transformers >= 5 keeps the same parameters in rope_parameters; older configs write "type".
  const std::string base = R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, )";
  const ModelConfig v5 = parse_hf_config(base + R"("rope_parameters": {"rope_theta": 500000.0,
      "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 1024}})", "c.json");
  EXPECT_EQ(v5.rope_theta, 500000.0f);
  EXPECT_EQ(v5.rope_scaling.type, RopeScaling::Type::llama3);
  EXPECT_EQ(v5.rope_scaling.factor, 8.0f);
  EXPECT_EQ(v5.rope_scaling.original_max_position, 1024);
  const ModelConfig old = parse_hf_config(base + R"("rope_scaling": {"type": "llama3", "factor": 2,
      "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 512}})", "c.json");
  EXPECT_EQ(old.rope_scaling.factor, 2.0f);
  EXPECT_EQ(parse_hf_config(base + R"("rope_scaling": null})", "c.json").rope_scaling.type, RopeScaling::Type::none);
}

TEST(HfConfig, RefusesRopeScalingAndSlidingWindowsItDoesNotImplement) {
  const std::string base = R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 8192, )";
  std::string msg = parse_error(base + R"("rope_scaling": {"type": "yarn", "factor": 4.0}})");
  EXPECT_NE(msg.find("ckpt/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rope_scaling.type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("yarn"), std::string::npos) << msg;
  msg = parse_error(base + R"("rope_scaling": {"rope_type": "linear", "factor": 2.0}})");
  EXPECT_NE(msg.find("rope_scaling.rope_type"), std::string::npos) << msg;
  msg = parse_error(base + R"("rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000}})");
  EXPECT_NE(msg.find("rope_parameters.rope_type"), std::string::npos) << msg;
  msg = parse_error(base + R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0}})");
  EXPECT_NE(msg.find("rope_scaling.original_max_position_embeddings"), std::string::npos) << msg;
  msg = parse_error(base + R"("rope_scaling": {"rope_type": "llama3", "factor": 0.5, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}})");
  EXPECT_NE(msg.find("rope_scaling.factor"), std::string::npos) << msg;
  msg = parse_error(base + R"("rope_scaling": 2})");
  EXPECT_NE(msg.find("rope_scaling"), std::string::npos) << msg;

  // Mistral 7B v0.1: a 4096-token window inside an 8192 model would change attention.
  msg = parse_error(base + R"("model_type": "mistral", "sliding_window": 4096})");
  EXPECT_NE(msg.find("sliding_window"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4096"), std::string::npos) << msg;
  msg = parse_error(base + R"("model_type": "qwen2", "use_sliding_window": true, "sliding_window": 4096})");
  EXPECT_NE(msg.find("sliding_window"), std::string::npos) << msg;
  // Windows that cannot take effect load: null, switched off (Qwen2 writes one beside
  // use_sliding_window false), or no shorter than the model.
  EXPECT_EQ(parse_error(base + R"("model_type": "mistral", "sliding_window": null})"), "");
  EXPECT_EQ(parse_error(base + R"("model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": false})"), "");
  EXPECT_EQ(parse_error(base + R"("model_type": "qwen2", "sliding_window": 4096})"), "");  // HF default: off
  EXPECT_EQ(parse_error(base + R"("model_type": "mistral", "sliding_window": 8192})"), "");
}

TEST(HfConfig, MissingFileIsNamed) {
  try {
    read_hf_config("/nonexistent/dir/config.json");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/config.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace servelab
