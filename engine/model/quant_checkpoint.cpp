// Reading quantized checkpoints: quantization_config and each Linear's tensors.
#include "engine/model/quant_checkpoint.h"

#include <cstring>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/model/quant_pack.h"
#include "engine/model/tensors.h"

namespace servelab {
namespace {

using nlohmann::json;

std::runtime_error config_error(const std::string& path, const std::string& what) {
  return std::runtime_error(path + ": quantization_config: " + what);
}

int int_or(const json& j, const char* key, int fallback) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int>() : fallback;
}
std::string string_or(const json& j, const char* key, const std::string& fallback) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}

// compressed-tensors' int4 weight-only scheme (format "pack-quantized", llm-compressor's W4A16):
// weights {num_bits: 4, type: int, strategy: group | channel, group_size, symmetric, actorder}.
QuantScheme pack_quantized_scheme(const json& group, const std::string& path) {
  const json& wq = group.contains("weights") ? group["weights"] : json();
  if (!wq.is_object() || int_or(wq, "num_bits", 0) != 4 || string_or(wq, "type", "") != "int")
    throw config_error(path, "pack-quantized config_groups weights must be {num_bits: 4, type: int}");
  if (group.contains("input_activations") && !group["input_activations"].is_null())
    throw config_error(path, "pack-quantized with input_activations is not supported (int4 is weight-only here)");
  QuantScheme s;
  s.method = Quantization::int4_gptq;
  s.pack_quantized = true;
  const std::string strategy = string_or(wq, "strategy", "group");
  if (strategy == "group") {
    s.group_size = int_or(wq, "group_size", 0);
    if (s.group_size < 1) throw config_error(path, "weights.group_size must be >= 1 with strategy group");
  } else if (strategy == "channel") {
    s.group_size = -1;  // one group over every input channel
  } else {
    throw config_error(path, "weights.strategy \"" + strategy + "\" is not supported for int4 (group or channel)");
  }
  s.act_order = wq.contains("actorder") && !wq["actorder"].is_null() && !(wq["actorder"].is_boolean() && !wq["actorder"].get<bool>());
  return s;
}

QuantScheme compressed_tensors_scheme(const json& qc, const std::string& path) {
  if (!qc.contains("config_groups") || !qc["config_groups"].is_object() || qc["config_groups"].size() != 1)
    throw config_error(path, "config_groups must hold exactly one group (targets [\"Linear\"])");
  const json& group = qc["config_groups"].begin().value();
  // The format sits at the top (older writers) or in the group (newer ones).
  const std::string format = string_or(group, "format", string_or(qc, "format", ""));
  if (format == "pack-quantized") return pack_quantized_scheme(group, path);
  if (format != "float-quantized" && format != "naive-quantized")
    throw config_error(path, "compressed-tensors format \"" + format +
                                 "\" is not supported (float-quantized FP8 and pack-quantized int4 are)");
  const json& wq = group.contains("weights") ? group["weights"] : json();
  if (!wq.is_object() || int_or(wq, "num_bits", 0) != 8 || string_or(wq, "type", "") != "float")
    throw config_error(path, "config_groups weights must be {num_bits: 8, type: float} (FP8 E4M3)");
  QuantScheme s;
  s.method = Quantization::fp8;
  const std::string strategy = string_or(wq, "strategy", "tensor");
  if (strategy == "tensor") s.fp8_scales = Fp8WeightScales::per_tensor;
  else if (strategy == "channel") s.fp8_scales = Fp8WeightScales::per_channel;
  else throw config_error(path, "weights.strategy \"" + strategy + "\" is not supported (tensor or channel)");
  const json& act = group.contains("input_activations") ? group["input_activations"] : json();
  if (act.is_null()) {
    s.activations = ActivationQuant::none;  // FP8 weights, activations unquantized (W8A16)
  } else {
    if (int_or(act, "num_bits", 0) != 8 || string_or(act, "type", "") != "float")
      throw config_error(path, "input_activations must be {num_bits: 8, type: float} or null");
    const bool dynamic = act.contains("dynamic") && act["dynamic"].is_boolean() && act["dynamic"].get<bool>();
    const std::string astrat = string_or(act, "strategy", "tensor");
    if (!dynamic) s.activations = ActivationQuant::fp8_static;
    else if (astrat == "token") s.activations = ActivationQuant::fp8_per_token;
    else if (astrat == "tensor") s.activations = ActivationQuant::fp8_per_tensor;
    else throw config_error(path, "input_activations.strategy \"" + astrat + "\" is not supported (token or tensor)");
  }
  return s;
}

template <typename T>
std::vector<T> read_raw(const TensorRef& r) {
  std::vector<T> v(size_t(r.tensor->numel));
  std::memcpy(v.data(), r.file->data(*r.tensor), size_t(r.tensor->nbytes));
  return v;
}

}  // namespace

const char* to_string(QuantCheckpointFormat f) {
  switch (f) {
    case QuantCheckpointFormat::compressed_tensors_fp8: return "compressed-tensors";
    case QuantCheckpointFormat::vllm_fp8: return "fp8";
    case QuantCheckpointFormat::awq: return "awq";
    case QuantCheckpointFormat::gptq: return "gptq";
    case QuantCheckpointFormat::compressed_tensors_int4: return "compressed-tensors-int4";
  }
  return "?";
}

std::optional<QuantScheme> read_quant_scheme(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("quantization_config") || j["quantization_config"].is_null()) return std::nullopt;
  const json& qc = j["quantization_config"];
  if (!qc.is_object()) throw config_error(path, "must be an object");
  const std::string method = string_or(qc, "quant_method", "");
  if (method == "compressed-tensors") return compressed_tensors_scheme(qc, path);
  if (method == "fp8") {
    if (qc.contains("weight_block_size") && !qc["weight_block_size"].is_null())
      throw config_error(path, "weight_block_size (block-wise FP8 scales) is not supported; per-tensor and per-channel are");
    QuantScheme s;
    s.method = Quantization::fp8;
    const std::string act = string_or(qc, "activation_scheme", "dynamic");
    if (act == "dynamic") s.activations = ActivationQuant::fp8_per_tensor;
    else if (act == "static") s.activations = ActivationQuant::fp8_static;
    else throw config_error(path, "activation_scheme \"" + act + "\" must be dynamic or static");
    return s;
  }
  if (method == "awq" || method == "gptq") {
    QuantScheme s;
    s.method = method == "awq" ? Quantization::int4_awq : Quantization::int4_gptq;
    const int bits = int_or(qc, method == "awq" && qc.contains("w_bit") ? "w_bit" : "bits", 0);
    if (bits != 4) throw config_error(path, "bits = " + std::to_string(bits) + "; only 4-bit " + method + " is supported");
    s.group_size = int_or(qc, method == "awq" && qc.contains("q_group_size") ? "q_group_size" : "group_size", 128);
    if (s.group_size == 0 || s.group_size < -1) throw config_error(path, "group_size must be > 0 or -1");
    if (method == "awq") {
      const std::string version = string_or(qc, "version", "gemm");
      if (version != "gemm" && version != "GEMM")
        throw config_error(path, "AWQ version \"" + version + "\" is not supported (gemm packing only)");
      if (qc.contains("zero_point") && qc["zero_point"].is_boolean() && !qc["zero_point"].get<bool>())
        throw config_error(path, "AWQ without zero points is not supported");
    } else {
      s.act_order = qc.contains("desc_act") && qc["desc_act"].is_boolean() && qc["desc_act"].get<bool>();
      const std::string fmt = string_or(qc, "checkpoint_format", "gptq");
      if (fmt != "gptq" && fmt != "gptq_v2") throw config_error(path, "checkpoint_format \"" + fmt + "\" must be gptq or gptq_v2");
      s.gptq_v1 = fmt == "gptq";
    }
    return s;
  }
  throw config_error(path, "quant_method \"" + method + "\" is not supported (compressed-tensors, fp8, awq, gptq)");
}

bool is_quantized_linear(const std::string& name, std::string* prefix) {
  static const char* kLinears[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                   "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  if (name.rfind("model.layers.", 0) != 0) return false;
  for (const char* l : kLinears) {
    const std::string tail = std::string(".") + l + ".weight";
    if (name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0) {
      if (prefix) *prefix = name.substr(0, name.size() - 7);  // strip ".weight"
      return true;
    }
  }
  return false;
}

QuantLinear read_quant_linear(const TensorLookup& lookup, const std::string& prefix, const QuantScheme& scheme,
                              int64_t out, int64_t in, std::vector<std::string>& consumed) {
  // Finds `name` with one of `dtypes` and, when `shapes` is not empty, one of those shapes.
  auto get = [&](const std::string& suffix, std::vector<std::string> dtypes,
                 std::vector<std::vector<int64_t>> shapes, bool required = true) -> TensorRef {
    const std::string name = prefix + "." + suffix;
    TensorRef r = lookup(name);
    if (!r.tensor) {
      if (!required) return r;
      throw std::runtime_error("missing tensor " + name + " (a " + to_string(scheme.method) + " checkpoint" +
                               (shapes.empty() ? "" : ", shape " + shape_string(shapes[0])) + ")");
    }
    bool dtype_ok = false;
    for (const auto& d : dtypes) dtype_ok = dtype_ok || r.tensor->dtype_name == d;
    if (!dtype_ok)
      throw std::runtime_error(r.file->path() + ": tensor " + name + " has dtype " + r.tensor->dtype_name + ", expected " +
                               dtypes[0]);
    bool shape_ok = shapes.empty();
    for (const auto& s : shapes) shape_ok = shape_ok || r.tensor->shape == s;
    if (!shape_ok)
      throw std::runtime_error(r.file->path() + ": tensor " + name + " has shape " + shape_string(r.tensor->shape) +
                               ", expected " + shape_string(shapes[0]));
    consumed.push_back(name);
    return r;
  };
  auto floats = [](const TensorRef& r) { return r.file->read_f32(r.tensor->name); };
  const int group = scheme.group_size > 0 ? scheme.group_size : static_cast<int>(in);
  try {
    if (scheme.method == Quantization::fp8) {
      QuantLinear q;
      q.kind = QuantLinear::Kind::fp8_e4m3;
      q.out = out;
      q.in = in;
      q.codes = read_raw<uint8_t>(get("weight", {"F8_E4M3"}, {{out, in}}));
      q.scales = floats(get("weight_scale", {"F32", "BF16", "F16"}, {{}, {1}, {out}, {out, 1}}));
      if (const TensorRef s = get("input_scale", {"F32", "BF16", "F16"}, {{}, {1}}, false); s.tensor)
        q.input_scale = floats(s)[0];
      else if (scheme.activations == ActivationQuant::fp8_static)
        throw std::runtime_error("missing tensor " + prefix + ".input_scale (static activation scales)");
      q.validate();
      return q;
    }
    const int64_t n_groups = (in + group - 1) / group;
    if (scheme.method == Quantization::int4_awq) {
      AwqTensors a;
      a.qweight = read_raw<int32_t>(get("qweight", {"I32"}, {{in, out / 8}}));
      a.qzeros = read_raw<int32_t>(get("qzeros", {"I32"}, {{n_groups, out / 8}}));
      a.scales = floats(get("scales", {"F16", "BF16", "F32"}, {{n_groups, out}}));
      return unpack_awq(a, out, in, group);
    }
    if (scheme.method == Quantization::int4_gptq && scheme.pack_quantized) {
      CtInt4Tensors t;
      t.weight_packed = read_raw<int32_t>(get("weight_packed", {"I32"}, {{out, in / 8}}));
      t.weight_scale = floats(get("weight_scale", {"BF16", "F16", "F32"}, {{out, n_groups}}));
      if (const TensorRef z = get("weight_zero_point", {"I32"}, {{out / 8, n_groups}}, false); z.tensor)
        t.weight_zero_point = read_raw<int32_t>(z);
      if (const TensorRef gi = get("weight_g_idx", {"I32"}, {{in}}, false); gi.tensor) t.weight_g_idx = read_raw<int32_t>(gi);
      if (const TensorRef ws = get("weight_shape", {"I64", "I32"}, {{2}}, false); ws.tensor) {
        int64_t shape[2];
        if (ws.tensor->dtype_name == "I64") std::memcpy(shape, ws.file->data(*ws.tensor), sizeof(shape));
        else {
          int32_t s32[2];
          std::memcpy(s32, ws.file->data(*ws.tensor), sizeof(s32));
          shape[0] = s32[0];
          shape[1] = s32[1];
        }
        if (shape[0] != out || shape[1] != in)
          throw std::runtime_error(ws.file->path() + ": tensor " + prefix + ".weight_shape is [" + std::to_string(shape[0]) +
                                   ", " + std::to_string(shape[1]) + "], expected [" + std::to_string(out) + ", " +
                                   std::to_string(in) + "]");
      }
      return unpack_ct_int4(t, out, in, group);
    }
    if (scheme.method == Quantization::int4_gptq) {
      GptqTensors g;
      g.qweight = read_raw<int32_t>(get("qweight", {"I32"}, {{in / 8, out}}));
      g.qzeros = read_raw<int32_t>(get("qzeros", {"I32"}, {{n_groups, out / 8}}));
      g.scales = floats(get("scales", {"F16", "BF16", "F32"}, {{n_groups, out}}));
      if (const TensorRef gi = get("g_idx", {"I32"}, {{in}}, false); gi.tensor) g.g_idx = read_raw<int32_t>(gi);
      return unpack_gptq(g, out, in, group, scheme.gptq_v1);
    }
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(prefix + ": " + e.what());
  }
  throw std::runtime_error(prefix + ": quantization " + std::string(to_string(scheme.method)) + " has no tensors to read");
}

}  // namespace servelab
