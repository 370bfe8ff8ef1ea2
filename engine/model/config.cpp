// Presets with the real shapes of public checkpoints (from their Hugging Face config.json), the
// parameter count, and validation.
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "engine/model/config.h"

namespace servelab {
namespace {

struct PresetEntry {
  const char* name;
  ModelConfig (*make)();
};

ModelConfig make(const char* name, int d, int layers, int heads, int kv_heads, int ffn, int vocab,
                 float theta, float eps, int max_pos, bool tied, DType dtype, int eos) {
  ModelConfig c;
  c.name = name;
  c.hidden_size = d;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.intermediate_size = ffn;
  c.vocab_size = vocab;
  c.rope_theta = theta;
  c.rms_eps = eps;
  c.max_position = max_pos;
  c.tie_embeddings = tied;
  c.dtype = dtype;
  c.eos_token = eos;
  return c;
}

// A few million parameters with GQA (8 query heads share 2 KV heads): tests and the quickstart.
ModelConfig tiny() {
  return make("tiny", 256, 4, 8, 2, 704, 2048, 10000.0f, 1e-5f, 2048, false, DType::bf16, 1);
}
// Qwen/Qwen2.5-0.5B: q/k/v biases, tied embeddings, 14 heads of 64 over 2 KV heads.
ModelConfig qwen25_05b() {
  ModelConfig c = make("qwen2.5-0.5b", 896, 24, 14, 2, 4864, 151936, 1e6f, 1e-6f, 32768, true,
                       DType::bf16, 151643);
  c.attention_bias = true;
  return c;
}
// meta-llama/Llama-3.2-1B, with its llama3 rope_scaling.
ModelConfig llama32_1b() {
  ModelConfig c = make("llama3.2-1b", 2048, 16, 32, 8, 8192, 128256, 500000.0f, 1e-5f, 131072, true,
                       DType::bf16, 128001);
  c.rope_scaling = {.type = RopeScaling::Type::llama3,
                    .factor = 32.0f,
                    .low_freq_factor = 1.0f,
                    .high_freq_factor = 4.0f,
                    .original_max_position = 8192};
  return c;
}
// meta-llama/Llama-2-7b-hf (published in float16).
ModelConfig llama2_7b() {
  return make("llama2-7b", 4096, 32, 32, 32, 11008, 32000, 10000.0f, 1e-5f, 4096, false, DType::f16, 2);
}
// meta-llama/Meta-Llama-3-8B.
ModelConfig llama3_8b() {
  return make("llama3-8b", 4096, 32, 32, 8, 14336, 128256, 500000.0f, 1e-5f, 8192, false, DType::bf16,
              128001);
}
// meta-llama/Llama-2-13b-hf (published in float16).
ModelConfig llama2_13b() {
  return make("llama2-13b", 5120, 40, 40, 40, 13824, 32000, 10000.0f, 1e-5f, 4096, false, DType::f16, 2);
}
// meta-llama/Meta-Llama-3-70B.
ModelConfig llama3_70b() {
  return make("llama3-70b", 8192, 80, 64, 8, 28672, 128256, 500000.0f, 1e-5f, 8192, false, DType::bf16,
              128001);
}

// The constructed induction model (engine/model/induction_weights.h): its weights are set, not
// drawn. Heads of 256 and rope_theta 1e8 leave 62 RoPE pairs nearly still over 2048 positions
// (position-free matching) and 16 fast ones (offsets).
ModelConfig copy_tiny() {
  return make("copy-tiny", 768, 2, 3, 3, 496, 2048, 1e8f, 1e-6f, 2048, false, DType::f32, 1);
}

constexpr PresetEntry kPresets[] = {
    {"tiny", tiny},           {"qwen2.5-0.5b", qwen25_05b}, {"llama3.2-1b", llama32_1b},
    {"llama2-7b", llama2_7b}, {"llama3-8b", llama3_8b},     {"llama2-13b", llama2_13b},
    {"llama3-70b", llama3_70b}, {"copy-tiny", copy_tiny},
};

std::string field_error(const char* field, int64_t got, const std::string& rule) {
  return std::string(field) + " (" + std::to_string(got) + ") " + rule;
}

void require_positive(const char* field, int64_t v) {
  if (v <= 0) throw std::invalid_argument(field_error(field, v, "must be >= 1"));
}

}  // namespace

ModelConfig preset(const std::string& name) {
  for (const auto& p : kPresets)
    if (name == p.name) return p.make();
  std::string names;
  for (const auto& p : kPresets) names += (names.empty() ? "" : ", ") + std::string(p.name);
  throw std::invalid_argument("unknown model preset '" + name + "' (known: " + names + ")");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

int64_t ModelConfig::n_params() const {
  const int64_t d = hidden_size, dq = int64_t(n_heads) * head_dim(), dkv = kv_dim();
  const int64_t ffn = intermediate_size, v = vocab_size;
  int64_t per_layer = d * dq + 2 * d * dkv + dq * d  // q, k, v, o
                      + 3 * d * ffn                   // gate, up, down
                      + 2 * d;                        // two RMSNorm weights
  if (attention_bias) per_layer += dq + 2 * dkv;
  int64_t total = v * d + int64_t(n_layers) * per_layer + d;
  if (!tie_embeddings) total += v * d;
  return total;
}

void ModelConfig::validate() const {
  require_positive("hidden_size", hidden_size);
  require_positive("n_layers", n_layers);
  require_positive("n_heads", n_heads);
  require_positive("n_kv_heads", n_kv_heads);
  require_positive("intermediate_size", intermediate_size);
  require_positive("vocab_size", vocab_size);
  require_positive("max_position", max_position);
  if (hidden_size % n_heads != 0)
    throw std::invalid_argument(field_error("n_heads", n_heads, "must divide hidden_size (" +
                                                                    std::to_string(hidden_size) + ")"));
  if (n_heads % n_kv_heads != 0)
    throw std::invalid_argument(
        field_error("n_kv_heads", n_kv_heads, "must divide n_heads (" + std::to_string(n_heads) + ")"));
  if (head_dim() % 2 != 0)
    throw std::invalid_argument(field_error("head_dim", head_dim(),
                                            "must be even for rotary embeddings (hidden_size / n_heads)"));
  if (!(rms_eps > 0.0f) || rms_eps >= 1.0f)
    throw std::invalid_argument("rms_eps (" + std::to_string(rms_eps) + ") must be in (0, 1)");
  if (!(rope_theta > 0.0f))
    throw std::invalid_argument("rope_theta (" + std::to_string(rope_theta) + ") must be > 0");
  rope_scaling.validate();
  if (eos_token < -1 || eos_token >= vocab_size)
    throw std::invalid_argument(field_error("eos_token", eos_token,
                                            "must be -1 (none) or in [0, vocab_size) = [0, " +
                                                std::to_string(vocab_size) + ")"));
}

void RopeScaling::validate() const {
  if (type == Type::none) return;
  auto bad = [](const char* field, float got, const std::string& rule) {
    return std::invalid_argument(std::string("rope_scaling.") + field + " (" + std::to_string(got) + ") " + rule);
  };
  if (!(factor >= 1.0f) || !std::isfinite(factor)) throw bad("factor", factor, "must be a finite number >= 1");
  if (!(low_freq_factor > 0.0f) || !std::isfinite(low_freq_factor))
    throw bad("low_freq_factor", low_freq_factor, "must be a finite number > 0");
  if (!(high_freq_factor > low_freq_factor) || !std::isfinite(high_freq_factor))
    throw bad("high_freq_factor", high_freq_factor,
              "must be finite and > low_freq_factor (" + std::to_string(low_freq_factor) + ")");
  if (original_max_position < 1)
    throw std::invalid_argument(field_error("rope_scaling.original_max_position", original_max_position,
                                            "must be >= 1"));
}

std::vector<double> rope_inv_freq(const ModelConfig& c) {
  const int half = c.head_dim() / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(double(c.rope_theta), -2.0 * i / c.head_dim());
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScaling::Type::llama3) {
    const double old_len = rs.original_max_position;
    const double low_freq_wavelen = old_len / rs.low_freq_factor;    // longer: scaled by 1/factor
    const double high_freq_wavelen = old_len / rs.high_freq_factor;  // shorter: kept
    for (double& f : inv_freq) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_freq_wavelen) continue;
      if (wavelen > low_freq_wavelen) {
        f /= rs.factor;
        continue;
      }
      const double smooth = (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
      f = (1.0 - smooth) * f / rs.factor + smooth * f;
    }
  }
  return inv_freq;
}

}  // namespace servelab
