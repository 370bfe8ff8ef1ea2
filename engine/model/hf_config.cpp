#include "engine/model/hf_config.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace servelab {
namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(const json& j, const std::string& source) : j_(j), source_(source) {}

  std::runtime_error error(const std::string& what) const { return std::runtime_error(source_ + ": " + what); }

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  int positive_int(const char* key) const {
    if (!has(key)) throw error(std::string("missing key \"") + key + "\"");
    return positive_int_value(key, j_[key]);
  }
  int positive_int(const char* key, int fallback) const { return has(key) ? positive_int(key) : fallback; }

  int positive_int_value(const char* key, const json& v) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > std::numeric_limits<int>::max())
      throw error(std::string("key \"") + key + "\" must be a positive integer (got " + v.dump() + ")");
    return static_cast<int>(v.get<int64_t>());
  }

  float positive_float(const char* key, float fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    if (!v.is_number() || !(v.get<double>() > 0.0))
      throw error(std::string("key \"") + key + "\" must be a number > 0 (got " + v.dump() + ")");
    return static_cast<float>(v.get<double>());
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean())
      throw error(std::string("key \"") + key + "\" must be true or false (got " + j_[key].dump() + ")");
    return j_[key].get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string())
      throw error(std::string("key \"") + key + "\" must be a string (got " + j_[key].dump() + ")");
    return j_[key].get<std::string>();
  }

  const json& at(const char* key) const { return j_[key]; }

 private:
  const json& j_;
  const std::string source_;
};

bool is_qwen2(const json& j) {
  if (j.contains("model_type") && j["model_type"] == "qwen2") return true;
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"])
      if (a == "Qwen2ForCausalLM") return true;
  return false;
}

// The shortest decimal that reads back as the same float: 1e-06, not 9.999999974752427e-07.
double shortest(float f) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::stod(std::string(buf, r.ptr));
}

const char* torch_dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
  }
  return "?";
}

/// Reads HF's rope_scaling (or transformers >= 5's rope_parameters): null or rope_type
/// "default" = none, "llama3" with its four parameters; any other type is refused by name.
RopeScaling parse_rope_scaling(const Reader& r, const std::string& source) {
  const char* key = r.has("rope_scaling") ? "rope_scaling" : r.has("rope_parameters") ? "rope_parameters" : nullptr;
  RopeScaling rs;
  if (!key) return rs;
  const json& j = r.at(key);
  if (!j.is_object())
    throw r.error(std::string("key \"") + key + "\" must be an object or null (got " + j.dump() + ")");
  const Reader p(j, source);
  const char* type_key = p.has("rope_type") ? "rope_type" : "type";  // older configs write "type"
  const std::string type = p.string(type_key, "default");
  if (type == "default") return rs;
  if (type != "llama3")
    throw r.error(std::string("key \"") + key + "." + type_key + "\" is \"" + type +
                  "\": only \"llama3\" RoPE scaling is implemented (\"default\" or null for none)");
  auto required = [&](const char* field) -> const json& {
    if (!p.has(field)) throw r.error(std::string("missing key \"") + key + "." + field + "\" (rope_type llama3)");
    return j[field];
  };
  auto number = [&](const char* field) {
    const json& v = required(field);
    if (!v.is_number())
      throw r.error(std::string("key \"") + key + "." + field + "\" must be a number (got " + v.dump() + ")");
    return static_cast<float>(v.get<double>());
  };
  rs.type = RopeScaling::Type::llama3;
  rs.factor = number("factor");
  rs.low_freq_factor = number("low_freq_factor");
  rs.high_freq_factor = number("high_freq_factor");
  required("original_max_position_embeddings");
  rs.original_max_position = p.positive_int("original_max_position_embeddings");
  return rs;
}

/// Sliding-window attention is not implemented: a window is accepted only where it cannot take
/// effect (null, switched off by Qwen2's use_sliding_window false, or no shorter than the model).
void check_sliding_window(const Reader& r, const std::string& model_type, int max_position) {
  if (!r.has("sliding_window")) return;
  const bool used = r.boolean("use_sliding_window", model_type != "qwen2");  // HF Qwen2 defaults to off
  if (!used) return;
  const json& w = r.at("sliding_window");
  if (!w.is_number_integer())
    throw r.error("key \"sliding_window\" must be an integer or null (got " + w.dump() + ")");
  if (w.get<int64_t>() < max_position)
    throw r.error("key \"sliding_window\" (" + w.dump() + ") is not supported: sliding-window attention is not "
                  "implemented (accepted: null, use_sliding_window false, or a window >= max_position_embeddings = " +
                  std::to_string(max_position) + ")");
}

}  // namespace

ModelConfig parse_hf_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw std::runtime_error(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw std::runtime_error(source + ": expected a JSON object");
  const Reader r(j, source);

  const std::string model_type = r.string("model_type", "llama");
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2")
    throw r.error("model_type \"" + model_type + "\" is not a supported Llama-family decoder (llama, mistral, qwen2)");
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") throw r.error("hidden_act \"" + act + "\" is not supported (only silu)");
  if (r.boolean("mlp_bias", false)) throw r.error("mlp_bias true is not supported");

  ModelConfig c;
  c.name = r.string("_name_or_path", "custom");
  if (c.name.empty()) c.name = "custom";
  c.hidden_size = r.positive_int("hidden_size");
  c.n_layers = r.positive_int("num_hidden_layers");
  c.n_heads = r.positive_int("num_attention_heads");
  c.n_kv_heads = r.positive_int("num_key_value_heads", c.n_heads);
  c.intermediate_size = r.positive_int("intermediate_size");
  c.vocab_size = r.positive_int("vocab_size");
  // transformers >= 5 writes {"rope_parameters": {"rope_theta": ..., "rope_type": ...}}.
  if (!r.has("rope_theta") && r.has("rope_parameters")) {
    const json& rp = r.at("rope_parameters");
    if (!rp.is_object()) throw r.error("key \"rope_parameters\" must be an object (got " + rp.dump() + ")");
    const Reader rope(rp, source);
    c.rope_theta = rope.positive_float("rope_theta", 10000.0f);
  } else {
    c.rope_theta = r.positive_float("rope_theta", 10000.0f);
  }
  c.rope_scaling = parse_rope_scaling(r, source);
  c.rms_eps = r.positive_float("rms_norm_eps", 1e-6f);
  c.max_position = r.positive_int("max_position_embeddings", 2048);
  check_sliding_window(r, model_type, c.max_position);
  c.tie_embeddings = r.boolean("tie_word_embeddings", false);
  c.attention_bias = is_qwen2(j) ? true : r.boolean("attention_bias", false);
  if (r.has("head_dim")) {
    const int head_dim = r.positive_int("head_dim");
    if (c.hidden_size % c.n_heads != 0 || head_dim != c.hidden_size / c.n_heads)
      throw r.error("key \"head_dim\" (" + std::to_string(head_dim) +
                    ") must equal hidden_size / num_attention_heads; other head sizes are not supported");
  }
  // transformers >= 4.56 writes "dtype"; older versions "torch_dtype". HF's default is float32.
  const char* dtype_key = r.has("dtype") ? "dtype" : "torch_dtype";
  const std::string dtype = r.string(dtype_key, "float32");
  try {
    c.dtype = parse_dtype(dtype);
  } catch (const std::invalid_argument&) {
    throw r.error(std::string("key \"") + dtype_key + "\" is \"" + dtype + "\"; expected bfloat16, float16 or float32");
  }
  if (r.has("eos_token_id")) {
    // An integer, or a list whose first entry is the end-of-text token (Llama 3 instruct).
    const json& e = r.at("eos_token_id");
    const json& first = e.is_array() && !e.empty() ? e[0] : e;
    if (!first.is_number_integer() || first.get<int64_t>() < 0 ||
        first.get<int64_t>() > std::numeric_limits<int>::max())
      throw r.error("key \"eos_token_id\" must be an integer >= 0 or a non-empty list of them (got " + e.dump() + ")");
    c.eos_token = first.get<int>();
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw r.error(e.what());
  }
  return c;
}

ModelConfig read_hf_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open (no config.json? expected a Hugging Face model folder)");
  std::stringstream ss;
  ss << in.rdbuf();
  ModelConfig c = parse_hf_config(ss.str(), path);
  if (c.name == "custom") {
    const std::string folder = std::filesystem::absolute(path).parent_path().filename().string();
    if (!folder.empty()) c.name = folder;
  }
  return c;
}

std::string hf_config_json(const ModelConfig& c) {
  const bool qwen = c.attention_bias;
  nlohmann::ordered_json j;
  j["_name_or_path"] = c.name;
  j["architectures"] = {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = qwen ? "qwen2" : "llama";
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim();
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position;
  j["rope_theta"] = shortest(c.rope_theta);
  if (c.rope_scaling.type == RopeScaling::Type::llama3)
    j["rope_scaling"] = {{"factor", shortest(c.rope_scaling.factor)},
                         {"high_freq_factor", shortest(c.rope_scaling.high_freq_factor)},
                         {"low_freq_factor", shortest(c.rope_scaling.low_freq_factor)},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position},
                         {"rope_type", "llama3"}};
  j["rms_norm_eps"] = shortest(c.rms_eps);
  j["tie_word_embeddings"] = c.tie_embeddings;
  if (!qwen) j["attention_bias"] = false;
  if (!qwen) j["mlp_bias"] = false;
  if (qwen) j["use_sliding_window"] = false;
  j["torch_dtype"] = torch_dtype_name(c.dtype);
  if (c.eos_token >= 0) j["eos_token_id"] = c.eos_token;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

void write_hf_config(const ModelConfig& config, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(path + ": cannot create");
  out << hf_config_json(config);
  out.close();
  if (!out) throw std::runtime_error(path + ": write failed");
}

}  // namespace servelab
