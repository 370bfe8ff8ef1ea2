#include "engine/lora/peft.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/model/safetensors.h"

namespace servelab {
namespace fs = std::filesystem;
namespace {

std::runtime_error folder_error(const std::string& dir, const std::string& what) {
  return std::runtime_error("LoRA adapter " + dir + ": " + what);
}

/// The config's target modules: a list of PEFT module names, or "all-linear".
std::array<bool, kLoraTargets> parse_targets(const std::string& dir, const nlohmann::json& j) {
  std::array<bool, kLoraTargets> on{};
  if (j.is_string()) {
    if (j.get<std::string>() != "all-linear")
      throw folder_error(dir, "target_modules \"" + j.get<std::string>() +
                                  "\" is a regex; only a list of module names or \"all-linear\" is supported");
    on.fill(true);
    return on;
  }
  if (!j.is_array() || j.empty()) throw folder_error(dir, "target_modules must be a non-empty list of module names");
  for (const auto& m : j) {
    LoraTarget t;
    if (!m.is_string() || !lora_target_from_name(m.get<std::string>(), t))
      throw folder_error(dir, "target_modules names " + m.dump() +
                                  "; supported: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
    on[size_t(t)] = true;
  }
  return on;
}

void refuse_if(bool cond, const std::string& dir, const std::string& what) {
  if (cond) throw folder_error(dir, what + " is not supported");
}

bool set_nonempty(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return false;
  return !(cfg[key].is_object() || cfg[key].is_array()) || !cfg[key].empty();
}

}  // namespace

std::string peft_tensor_name(int layer, LoraTarget t, char matrix) {
  return "base_model.model.model.layers." + std::to_string(layer) + "." + peft_block_name(t) + "." +
         peft_module_name(t) + ".lora_" + matrix + ".weight";
}

LoraAdapter read_peft_adapter(const std::string& dir, const std::string& name, const ModelConfig& config, int max_rank) {
  const fs::path cfg_path = fs::path(dir) / "adapter_config.json";
  const fs::path st_path = fs::path(dir) / "adapter_model.safetensors";
  if (!fs::is_directory(dir)) throw folder_error(dir, "no such folder");
  if (!fs::exists(cfg_path)) throw folder_error(dir, "no adapter_config.json");
  if (!fs::exists(st_path)) {
    if (fs::exists(fs::path(dir) / "adapter_model.bin"))
      throw folder_error(dir, "has adapter_model.bin only; save it as safetensors (safe_serialization=True)");
    throw folder_error(dir, "no adapter_model.safetensors");
  }
  nlohmann::json cfg;
  try {
    std::ifstream in(cfg_path);
    cfg = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw folder_error(dir, std::string("adapter_config.json is not valid JSON: ") + e.what());
  }
  if (!cfg.is_object()) throw folder_error(dir, "adapter_config.json must hold an object");
  LoraAdapter a;
  a.name = name;
  try {
    if (cfg.contains("peft_type") && cfg["peft_type"] != "LORA")
      throw folder_error(dir, "peft_type " + cfg["peft_type"].dump() + " is not LORA");
    if (!cfg.contains("r") || !cfg["r"].is_number_integer()) throw folder_error(dir, "adapter_config.json has no integer r");
    a.rank = cfg["r"].get<int>();
    a.alpha = cfg.value("lora_alpha", 8.0f);
    a.use_rslora = cfg.value("use_rslora", false);
    refuse_if(cfg.value("fan_in_fan_out", false), dir, "fan_in_fan_out");
    refuse_if(cfg.value("use_dora", false), dir, "use_dora (DoRA)");
    refuse_if(cfg.contains("bias") && cfg["bias"] != "none", dir, "bias " + cfg["bias"].dump());
    refuse_if(set_nonempty(cfg, "modules_to_save"), dir, "modules_to_save");
    refuse_if(set_nonempty(cfg, "rank_pattern"), dir, "rank_pattern");
    refuse_if(set_nonempty(cfg, "alpha_pattern"), dir, "alpha_pattern");
    if (!cfg.contains("target_modules")) throw folder_error(dir, "adapter_config.json has no target_modules");
    a.targets = parse_targets(dir, cfg["target_modules"]);
  } catch (const nlohmann::json::exception& e) {
    throw folder_error(dir, std::string("adapter_config.json: ") + e.what());
  }
  if (a.rank < 1 || a.rank > max_rank)
    throw folder_error(dir, "rank r = " + std::to_string(a.rank) + " is outside [1, max_lora_rank = " +
                                std::to_string(max_rank) + "]; raise --max-lora-rank");
  a.scale = LoraAdapter::scale_for(a.alpha, a.rank, a.use_rslora);
  a.layers.resize(size_t(config.n_layers));

  const SafetensorsFile file(st_path.string());
  static const std::regex kName(R"(base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])\.weight)");
  for (const SafetensorsTensor& t : file.tensors()) {
    std::smatch m;
    if (!std::regex_match(t.name, m, kName))
      throw folder_error(dir, "tensor " + t.name + " is not a LoRA A or B of a decoder layer's linear");
    const long layer = std::stol(m[1].str());
    LoraTarget target;
    if (!lora_target_from_name(m[3].str(), target) || m[2].str() != peft_block_name(target))
      throw folder_error(dir, "tensor " + t.name + " targets an unknown module " + m[2].str() + "." + m[3].str());
    if (!a.targets[size_t(target)])
      throw folder_error(dir, "tensor " + t.name + " adapts " + peft_module_name(target) + ", which target_modules leaves out");
    if (layer >= config.n_layers)
      throw folder_error(dir, "tensor " + t.name + " is for layer " + std::to_string(layer) + "; the base model has " +
                                  std::to_string(config.n_layers));
    const bool is_a = m[4].str() == "A";
    const int64_t rows = is_a ? a.rank : lora_out_dim(config, target);
    const int64_t cols = is_a ? lora_in_dim(config, target) : a.rank;
    if (t.shape != std::vector<int64_t>{rows, cols}) {
      std::string got;
      for (int64_t s : t.shape) got += (got.empty() ? "" : ", ") + std::to_string(s);
      throw folder_error(dir, "tensor " + t.name + " has shape [" + got + "], the base model and r need [" +
                                  std::to_string(rows) + ", " + std::to_string(cols) + "]");
    }
    if (!t.supported) throw folder_error(dir, "tensor " + t.name + " has dtype " + t.dtype_name + " (BF16, F16 or F32 needed)");
    LoraPair& p = a.layers[size_t(layer)][size_t(target)];
    std::vector<float>& dst = is_a ? p.a : p.b;
    dst.resize(size_t(rows * cols));
    file.read_f32(t, dst.data());
  }
  for (int l = 0; l < config.n_layers; ++l)
    for (int i = 0; i < kLoraTargets; ++i) {
      if (!a.targets[size_t(i)]) continue;
      const LoraPair& p = a.layers[size_t(l)][size_t(i)];
      if (p.a.empty() || p.b.empty())
        throw folder_error(dir, "missing tensor " + peft_tensor_name(l, static_cast<LoraTarget>(i), p.a.empty() ? 'A' : 'B'));
    }
  a.validate(config, max_rank);
  return a;
}

void write_peft_adapter(const std::string& dir, const LoraAdapter& adapter, DType dtype, const std::string& base_model) {
  fs::create_directories(dir);
  nlohmann::json cfg;
  cfg["peft_type"] = "LORA";
  cfg["task_type"] = "CAUSAL_LM";
  cfg["base_model_name_or_path"] = base_model;
  cfg["r"] = adapter.rank;
  cfg["lora_alpha"] = adapter.alpha;
  cfg["use_rslora"] = adapter.use_rslora;
  cfg["lora_dropout"] = 0.0;
  cfg["bias"] = "none";
  cfg["fan_in_fan_out"] = false;
  cfg["target_modules"] = nlohmann::json::array();
  for (int i = 0; i < kLoraTargets; ++i)
    if (adapter.targets[size_t(i)]) cfg["target_modules"].push_back(peft_module_name(static_cast<LoraTarget>(i)));
  std::ofstream(fs::path(dir) / "adapter_config.json") << cfg.dump(2) << "\n";

  std::vector<SafetensorsEntry> entries;
  std::vector<const float*> values;
  for (size_t l = 0; l < adapter.layers.size(); ++l)
    for (int i = 0; i < kLoraTargets; ++i) {
      const LoraPair& p = adapter.layers[l][size_t(i)];
      if (!p.present()) continue;
      const LoraTarget t = static_cast<LoraTarget>(i);
      const int64_t r = adapter.rank;
      entries.push_back({peft_tensor_name(int(l), t, 'A'), dtype, {r, int64_t(p.a.size()) / r}});
      values.push_back(p.a.data());
      entries.push_back({peft_tensor_name(int(l), t, 'B'), dtype, {int64_t(p.b.size()) / r, r}});
      values.push_back(p.b.data());
    }
  write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), entries, values);
}

}  // namespace servelab
