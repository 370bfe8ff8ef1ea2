// Packing a quantized checkpoint's Linears into the cuda backend's layouts (quant_pack.h).
#include "engine/backend/cuda/quant_pack.h"

#include <stdexcept>
#include <string>

namespace servelab::cuda {
namespace quant_pack_detail {  // named: servelab_backend may be compiled as unity batches

std::invalid_argument refused(const std::string& why) {
  return std::invalid_argument("cuda backend, quantized checkpoint: " + why);
}

void pack_fp8(const std::vector<const QuantLinear*>& parts, PackedQuantLinear& p) {
  p.codes.reserve(size_t(p.out) * p.in);
  p.scales.reserve(size_t(p.out));
  bool all_per_tensor = true;
  for (const QuantLinear* q : parts) {
    if (q->input_scale > 0.0f)
      throw refused("static FP8 input scales run on backend cpu only (the GPU path quantizes activations dynamically)");
    p.codes.insert(p.codes.end(), q->codes.begin(), q->codes.end());
    const bool per_tensor = q->scales.size() == 1;
    all_per_tensor = all_per_tensor && per_tensor;
    for (int64_t o = 0; o < q->out; ++o) p.scales.push_back(per_tensor ? q->scales[0] : q->scales[size_t(o)]);
  }
  p.uniform_scales = all_per_tensor && parts.size() == 1;
}

void pack_int4(const std::vector<const QuantLinear*>& parts, PackedQuantLinear& p) {
  const int group = parts[0]->group_size;
  if (group < 16 || group % 16 != 0 || p.in % group != 0)
    throw refused("INT4 group size " + std::to_string(group) + " must be a multiple of 16 dividing the input (" +
                  std::to_string(p.in) + ")");
  p.group_size = group;
  const int64_t n_groups = p.in / group;
  p.codes.assign(size_t(p.out) * (p.in / 2), 0);
  p.scales.assign(size_t(n_groups) * p.out, 0.0f);
  p.zeros.assign(size_t(n_groups) * p.out, 0.0f);
  int64_t row0 = 0;
  for (const QuantLinear* q : parts) {
    if (q->group_size != group) throw refused("the fused Linears have different INT4 group sizes");
    for (int64_t k = 0; k < q->in && !q->g_idx.empty(); ++k)
      if (q->g_idx[size_t(k)] != k / group)
        throw refused("act-order INT4 (a g_idx that reorders the input) is not run on the GPU yet");
    for (int64_t o = 0; o < q->out; ++o) {
      const uint8_t* src = q->codes.data() + o * q->in;
      uint8_t* dst = p.codes.data() + (row0 + o) * (p.in / 2);
      for (int64_t j = 0; j < p.in / 2; ++j) dst[j] = uint8_t((src[2 * j] & 0xF) | (src[2 * j + 1] & 0xF) << 4);
    }
    for (int64_t g = 0; g < n_groups; ++g)
      for (int64_t o = 0; o < q->out; ++o) {
        p.scales[size_t(g * p.out + row0 + o)] = q->scales[size_t(g * q->out + o)];
        p.zeros[size_t(g * p.out + row0 + o)] = float(q->zeros[size_t(g * q->out + o)]);
      }
    row0 += q->out;
  }
}

}  // namespace quant_pack_detail

PackedQuantLinear pack_quant_linear(const std::vector<const QuantLinear*>& parts) {
  using namespace quant_pack_detail;
  if (parts.empty()) throw std::logic_error("pack_quant_linear: no matrices");
  PackedQuantLinear p;
  p.kind = parts[0]->kind;
  p.in = int(parts[0]->in);
  for (const QuantLinear* q : parts) {
    q->validate();
    if (q->kind != p.kind || q->in != p.in) throw refused("the fused Linears differ in format or input width");
    p.out += int(q->out);
  }
  if (p.in % 16 != 0 || p.out % 8 != 0)
    throw refused("a Linear of [" + std::to_string(p.out) + ", " + std::to_string(p.in) +
                  "]: the kernels need inputs a multiple of 16 and outputs a multiple of 8");
  if (p.kind == QuantLinear::Kind::fp8_e4m3) pack_fp8(parts, p);
  else pack_int4(parts, p);
  return p;
}

std::vector<PackedQuantLayer> pack_quant_layers(const ModelConfig& config, const std::vector<QuantLinear>& linears) {
  if (linears.size() != size_t(config.n_layers) * 7)
    throw std::invalid_argument("pack_quant_layers: " + std::to_string(linears.size()) + " Linears for " +
                                std::to_string(config.n_layers) + " layers (7 a layer)");
  std::vector<PackedQuantLayer> layers(size_t(config.n_layers));
  for (size_t l = 0; l < layers.size(); ++l) {
    const QuantLinear* q = &linears[l * 7];  // q, k, v, o, gate, up, down
    layers[l][0] = pack_quant_linear({q, q + 1, q + 2});
    layers[l][1] = pack_quant_linear({q + 3});
    layers[l][2] = pack_quant_linear({q + 4, q + 5});
    layers[l][3] = pack_quant_linear({q + 6});
  }
  return layers;
}

}  // namespace servelab::cuda
