#pragma once
// Hugging Face config.json <-> ModelConfig for Llama-family models (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM). rope_scaling: none or Llama 3's "llama3"; other kinds,
// and sliding windows that would take effect, are refused naming the key.
#include <string>

#include "engine/model/config.h"

namespace servelab {

/// Parse the text of a config.json. `source` (its path) prefixes every error, which names the
/// missing or bad key: "ckpt/config.json: missing key \"hidden_size\"". Throws std::runtime_error;
/// the result is validated.
ModelConfig parse_hf_config(const std::string& json_text, const std::string& source);

/// Read and parse a config.json file. The config's name is "_name_or_path" when set, else the
/// name of the folder holding the file.
ModelConfig read_hf_config(const std::string& path);

/// The config.json text for a config (HF keys; "architectures": ["Qwen2ForCausalLM"] when the
/// model has attention biases, else ["LlamaForCausalLM"]).
std::string hf_config_json(const ModelConfig& config);

/// Write hf_config_json(config) to path. Throws std::runtime_error naming the path.
void write_hf_config(const ModelConfig& config, const std::string& path);

}  // namespace servelab
