#pragma once
// Llama-family model shapes: presets with real shapes, validation, config.json parsing.
#include <cstdint>
#include <string>
#include <vector>

namespace servelab {

enum class DType { f32, f16, bf16 };
const char* to_string(DType d);
size_t dtype_size(DType d);
DType parse_dtype(const std::string& s);  ///< "f32"/"float32", "f16"/"float16", "bf16"/"bfloat16"; throws

/// RoPE frequency scaling. none: inv_freq_i = theta^(-2i/head_dim). llama3 (Llama 3.1/3.2,
/// Hugging Face rope_type "llama3"): wavelengths 2π/inv_freq shorter than
/// original_max_position / high_freq_factor are kept, those longer than
/// original_max_position / low_freq_factor are divided by factor, and those between are
/// interpolated smoothly between the two.
struct RopeScaling {
  enum class Type { none, llama3 };
  Type type = Type::none;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;  ///< HF original_max_position_embeddings
  /// Throws std::invalid_argument naming the field (rope_scaling.factor, ...) and its range.
  void validate() const;
};

/// Shapes of a Llama-family decoder (Llama 2/3, Mistral, Qwen2-style). MHA when
/// n_kv_heads == n_heads, GQA when it divides it, MQA when 1.
struct ModelConfig {
  std::string name = "custom";
  int hidden_size = 0;         ///< d
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int intermediate_size = 0;   ///< FFN size (SwiGLU)
  int vocab_size = 0;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;    ///< none unless the checkpoint asks for llama3 scaling
  float rms_eps = 1e-5f;
  int max_position = 2048;     ///< max model length (prompt + output)
  bool tie_embeddings = false;
  bool attention_bias = false; ///< Qwen2 has q/k/v biases
  DType dtype = DType::bf16;   ///< weight dtype on disk
  int eos_token = -1;          ///< -1 = none

  int head_dim() const { return hidden_size / n_heads; }
  int kv_dim() const { return n_kv_heads * head_dim(); }
  /// Parameter count (embeddings, all layers, final norm, LM head unless tied).
  int64_t n_params() const;
  /// Throws std::invalid_argument naming the bad field and its allowed range.
  void validate() const;
};

/// RoPE inverse frequencies, [head_dim / 2]: theta^(-2i/head_dim), then rope_scaling applied
/// (in double; Hugging Face computes the same in float32). Rotate-half RoPE turns the pair
/// (i, i + head_dim/2) of a head at position p by the angle p · inv_freq[i].
std::vector<double> rope_inv_freq(const ModelConfig& config);

/// Named presets: tiny, qwen2.5-0.5b, llama3.2-1b, llama2-7b, llama3-8b, llama2-13b, llama3-70b, and
/// copy-tiny, whose weights are constructed (engine/model/induction_weights.h), not drawn.
ModelConfig preset(const std::string& name);  ///< throws std::invalid_argument listing the names
std::vector<std::string> preset_names();

}  // namespace servelab
