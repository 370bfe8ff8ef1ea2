// write_quantized_checkpoint: small folders in the real layouts (compressed-tensors / vLLM fp8,
// AutoAWQ, GPTQ), so the loader is tested against files laid out as the quantizers write them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/model/half.h"
#include "engine/model/hf_config.h"
#include "engine/model/quant_checkpoint.h"
#include "engine/model/quant_pack.h"
#include "engine/model/tensors.h"

namespace servelab {
namespace {

using ojson = nlohmann::ordered_json;

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> f16_bytes(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_f16(v[i]);
  return bytes_of(h);
}

std::vector<uint8_t> bf16_bytes(const float* v, int64_t n) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) h[size_t(i)] = f32_to_bf16(v[i]);
  return bytes_of(h);
}

ojson quantization_config(const QuantWriteOptions& o) {
  switch (o.format) {
    case QuantCheckpointFormat::compressed_tensors_fp8: {
      ojson weights = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"dynamic", false},
                       {"strategy", o.fp8_scales == Fp8WeightScales::per_channel ? "channel" : "tensor"}};
      ojson acts = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"dynamic", o.static_input_scale <= 0},
                    {"strategy", o.static_input_scale > 0 || o.fp8_scales == Fp8WeightScales::per_tensor ? "tensor" : "token"}};
      return {{"quant_method", "compressed-tensors"}, {"format", "float-quantized"}, {"quantization_status", "compressed"},
              {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", acts}}}}},
              {"ignore", {"lm_head"}}};
    }
    case QuantCheckpointFormat::vllm_fp8:
      return {{"quant_method", "fp8"}, {"activation_scheme", o.static_input_scale > 0 ? "static" : "dynamic"}};
    case QuantCheckpointFormat::awq:
      return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", o.group_size}, {"zero_point", true}, {"version", "gemm"}};
    case QuantCheckpointFormat::gptq:
      return {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", o.group_size}, {"desc_act", o.act_order},
              {"sym", true}, {"checkpoint_format", o.gptq_v1 ? "gptq" : "gptq_v2"}};
    case QuantCheckpointFormat::compressed_tensors_int4: {
      ojson weights = {{"num_bits", 4},       {"type", "int"},          {"symmetric", o.symmetric},
                       {"dynamic", false},    {"strategy", "group"},    {"group_size", o.group_size},
                       {"actorder", o.act_order ? ojson("group") : ojson(nullptr)}};
      return {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"quantization_status", "compressed"},
              {"config_groups",
               {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr}}}}},
              {"ignore", {"lm_head"}}};
    }
  }
  return {};
}

// GPTQ's act order puts channels into groups by decreasing Hessian diagonal (the layer input's
// activation energy); without calibration data the writer uses the weights' column energy, a
// stand-in with the same effect on the layout: g_idx is a permutation, not k / group_size. The
// Hessian is the input's, so the Linears reading one input (q, k and v; gate and up) share one
// order, as real GPTQ checkpoints have it: their column energies are summed.
void add_column_energy(const float* w, int64_t out, int64_t in, std::vector<double>& energy) {
  energy.resize(size_t(in), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) energy[size_t(k)] += double(w[o * in + k]) * w[o * in + k];
}

std::vector<int32_t> act_order_g_idx(const std::vector<double>& energy, int group) {
  const int64_t in = int64_t(energy.size());
  std::vector<int64_t> order(static_cast<size_t>(in));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return energy[size_t(a)] > energy[size_t(b)]; });
  std::vector<int32_t> g_idx(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) g_idx[size_t(order[size_t(i)])] = static_cast<int32_t>(i / group);
  return g_idx;
}

/// The Linears that read one input share a key: a layer's q, k and v ("...qkv"), its gate and up
/// ("...gate_up"); any other Linear is its own.
std::string input_key(const std::string& prefix) {
  static const std::pair<std::string, std::string> shared[] = {
      {"q_proj", "qkv"}, {"k_proj", "qkv"}, {"v_proj", "qkv"}, {"gate_proj", "gate_up"}, {"up_proj", "gate_up"}};
  for (const auto& [name, key] : shared)
    if (prefix.size() >= name.size() && prefix.compare(prefix.size() - name.size(), name.size(), name) == 0)
      return prefix.substr(0, prefix.size() - name.size()) + key;
  return prefix;
}

/// g_idx: GPTQ's act order for this Linear's input (empty: none).
void append_linear(std::vector<RawTensor>& out, const std::string& prefix, const float* w, int64_t rows, int64_t cols,
                   const QuantWriteOptions& o, const std::vector<int32_t>& g_idx) {
  auto bad_shape = [&](const std::string& why) {
    return std::invalid_argument(prefix + " [" + std::to_string(rows) + ", " + std::to_string(cols) + "]: " + why);
  };
  switch (o.format) {
    case QuantCheckpointFormat::compressed_tensors_fp8:
    case QuantCheckpointFormat::vllm_fp8: {
      if (o.format == QuantCheckpointFormat::vllm_fp8 && o.fp8_scales != Fp8WeightScales::per_tensor)
        throw std::invalid_argument("the vLLM fp8 layout has per-tensor weight scales; use compressed-tensors for per-channel");
      const QuantLinear q = quantize_fp8(w, rows, cols, o.fp8_scales);
      out.push_back({prefix + ".weight", "F8_E4M3", {rows, cols}, q.codes});
      std::vector<int64_t> scale_shape = o.fp8_scales == Fp8WeightScales::per_channel ? std::vector<int64_t>{rows, 1}
                                         : o.format == QuantCheckpointFormat::vllm_fp8 ? std::vector<int64_t>{}
                                                                                       : std::vector<int64_t>{1};
      out.push_back({prefix + ".weight_scale", "F32", scale_shape, bytes_of(q.scales)});
      if (o.static_input_scale > 0)
        out.push_back({prefix + ".input_scale", "F32", {1}, bytes_of(std::vector<float>{o.static_input_scale})});
      return;
    }
    case QuantCheckpointFormat::awq: {
      if (cols % o.group_size != 0) throw bad_shape("in_features must be a multiple of group_size " + std::to_string(o.group_size));
      if (rows % 8 != 0) throw bad_shape("out_features must be a multiple of 8");
      const AwqTensors a = pack_awq(quantize_int4(w, rows, cols, o.group_size, false));
      const int64_t ng = cols / o.group_size;
      out.push_back({prefix + ".qweight", "I32", {cols, rows / 8}, bytes_of(a.qweight)});
      out.push_back({prefix + ".qzeros", "I32", {ng, rows / 8}, bytes_of(a.qzeros)});
      out.push_back({prefix + ".scales", "F16", {ng, rows}, f16_bytes(a.scales)});
      return;
    }
    case QuantCheckpointFormat::gptq: {
      if (cols % o.group_size != 0) throw bad_shape("in_features must be a multiple of group_size " + std::to_string(o.group_size));
      if (rows % 8 != 0 || cols % 8 != 0) throw bad_shape("in and out features must be multiples of 8");
      const GptqTensors g = pack_gptq(quantize_int4(w, rows, cols, o.group_size, true, g_idx), o.gptq_v1);
      const int64_t ng = cols / o.group_size;
      out.push_back({prefix + ".qweight", "I32", {cols / 8, rows}, bytes_of(g.qweight)});
      out.push_back({prefix + ".qzeros", "I32", {ng, rows / 8}, bytes_of(g.qzeros)});
      out.push_back({prefix + ".scales", "F16", {ng, rows}, f16_bytes(g.scales)});
      out.push_back({prefix + ".g_idx", "I32", {cols}, bytes_of(g.g_idx)});
      return;
    }
    case QuantCheckpointFormat::compressed_tensors_int4: {
      if (cols % o.group_size != 0) throw bad_shape("in_features must be a multiple of group_size " + std::to_string(o.group_size));
      if (cols % 8 != 0 || (!o.symmetric && rows % 8 != 0))
        throw bad_shape("in_features (and out_features with zero points) must be multiples of 8");
      const CtInt4Tensors t = pack_ct_int4(quantize_int4(w, rows, cols, o.group_size, o.symmetric, g_idx), o.symmetric);
      const int64_t ng = cols / o.group_size;
      out.push_back({prefix + ".weight_packed", "I32", {rows, cols / 8}, bytes_of(t.weight_packed)});
      // The scales as quantize_int4 rounds them (fp16); llm-compressor writes the model's dtype,
      // which the loader takes as well.
      out.push_back({prefix + ".weight_scale", "F16", {rows, ng}, f16_bytes(t.weight_scale)});
      if (!o.symmetric) out.push_back({prefix + ".weight_zero_point", "I32", {rows / 8, ng}, bytes_of(t.weight_zero_point)});
      if (!t.weight_g_idx.empty()) out.push_back({prefix + ".weight_g_idx", "I32", {cols}, bytes_of(t.weight_g_idx)});
      out.push_back({prefix + ".weight_shape", "I64", {2}, bytes_of(std::vector<int64_t>{rows, cols})});
      return;
    }
  }
}

}  // namespace

void write_quantized_checkpoint(const ModelWeights& w, const std::string& dir, const QuantWriteOptions& o) {
  namespace fs = std::filesystem;
  w.config.validate();
  if (o.group_size < 1) throw std::invalid_argument("group_size must be >= 1 (got " + std::to_string(o.group_size) + ")");
  // GPTQ act order: one order per input (input_key), from the column energy of every Linear reading it.
  std::map<std::string, std::vector<int32_t>> g_idx;
  if ((o.format == QuantCheckpointFormat::gptq || o.format == QuantCheckpointFormat::compressed_tensors_int4) &&
      o.act_order) {
    std::map<std::string, std::vector<double>> energy;
    for (const TensorSpec& s : tensor_specs(w.config)) {
      std::string prefix;
      if (is_quantized_linear(s.name, &prefix))
        add_column_energy(tensor_storage(w, s.name).data(), s.shape[0], s.shape[1], energy[input_key(prefix)]);
    }
    for (const auto& [key, e] : energy) g_idx[key] = act_order_g_idx(e, o.group_size);
  }
  std::vector<RawTensor> tensors;
  for (const TensorSpec& s : tensor_specs(w.config)) {
    const std::vector<float>& v = tensor_storage(w, s.name);
    std::string prefix;
    if (is_quantized_linear(s.name, &prefix)) {
      const auto order = g_idx.find(input_key(prefix));
      append_linear(tensors, prefix, v.data(), s.shape[0], s.shape[1], o,
                    order == g_idx.end() ? std::vector<int32_t>{} : order->second);
    }
    else tensors.push_back({s.name, "BF16", s.shape, bf16_bytes(v.data(), s.numel())});
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw std::runtime_error(dir + ": cannot create directory: " + ec.message());
  for (const char* old : {"model.safetensors.index.json"}) fs::remove(fs::path(dir) / old, ec);
  ModelConfig config = w.config;
  config.dtype = DType::bf16;
  ojson j = ojson::parse(hf_config_json(config));
  j["quantization_config"] = quantization_config(o);
  const fs::path cfg = fs::path(dir) / "config.json";
  std::ofstream out(cfg, std::ios::binary | std::ios::trunc);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) throw std::runtime_error(cfg.string() + ": write failed");
  write_safetensors_raw((fs::path(dir) / "model.safetensors").string(), tensors);
}

}  // namespace servelab
