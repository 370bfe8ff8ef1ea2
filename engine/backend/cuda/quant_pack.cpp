// Packing a quantized checkpoint's Linears into the cuda backend's layouts (quant_pack.h).
#include "engine/backend/cuda/quant_pack.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace servelab::cuda {
namespace quant_pack_detail {  // named: servelab_backend may be compiled as unity batches

std::invalid_argument refused(const std::string& why) {
  return std::invalid_argument("cuda backend, quantized checkpoint: " + why);
}

void pack_fp8(const std::vector<const QuantLinear*>& parts, PackedQuantLinear& p) {
  p.codes.reserve(size_t(p.out) * p.in);
  p.scales.reserve(size_t(p.out));
  bool all_per_tensor = true;
  const bool static_scales = parts[0]->input_scale > 0.0f;
  for (const QuantLinear* q : parts) {
    // Static activation scales: one input, one scale; the fused Linears' largest, as vLLM (and
    // the cpu backend's QuantScheme::input_scales) takes it.
    if ((q->input_scale > 0.0f) != static_scales)
      throw refused("the fused Linears (q|k|v or gate|up) mix static and dynamic FP8 input scales");
    p.input_scale = std::max(p.input_scale, q->input_scale);
    p.codes.insert(p.codes.end(), q->codes.begin(), q->codes.end());
    const bool per_tensor = q->scales.size() == 1;
    all_per_tensor = all_per_tensor && per_tensor;
    for (int64_t o = 0; o < q->out; ++o) p.scales.push_back(per_tensor ? q->scales[0] : q->scales[size_t(o)]);
  }
  p.uniform_scales = all_per_tensor && parts.size() == 1;
}

/// Act order (GPTQ's g_idx): the input positions sorted by group, within a group by channel, so that
/// each group's channels are contiguous; empty when g_idx is k / group (or absent). Refuses a
/// g_idx whose groups do not each hold `group` inputs.
std::vector<int32_t> act_order_perm(const QuantLinear& q, int group) {
  if (q.g_idx.empty()) return {};
  bool plain = true;
  for (int64_t k = 0; k < q.in && plain; ++k) plain = q.g_idx[size_t(k)] == k / group;
  if (plain) return {};
  const int64_t n_groups = q.in / group;
  std::vector<int64_t> start(size_t(n_groups) + 1, 0);
  for (int64_t k = 0; k < q.in; ++k) ++start[size_t(q.g_idx[size_t(k)]) + 1];  // in range: QuantLinear::validate
  for (int64_t g = 0; g < n_groups; ++g) {
    if (start[size_t(g) + 1] != group)
      throw refused("act-order g_idx puts " + std::to_string(start[size_t(g) + 1]) + " inputs in group " +
                    std::to_string(g) + " (the GPU takes groups of exactly " + std::to_string(group) + ")");
    start[size_t(g) + 1] += start[size_t(g)];
  }
  std::vector<int32_t> perm(size_t(q.in));
  for (int64_t k = 0; k < q.in; ++k) perm[size_t(start[size_t(q.g_idx[size_t(k)])]++)] = int32_t(k);
  return perm;
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
    // One product runs a fused q|k|v or gate|up over one x: their matrices must take x in one order
    // (GPTQ orders by the layer input's Hessian, which q, k and v share, as gate and up do).
    if (q == parts[0]) p.perm = act_order_perm(*q, group);
    else if (act_order_perm(*q, group) != p.perm)
      throw refused("the fused Linears (q|k|v or gate|up) order their input differently (act-order g_idx): the GPU "
                    "runs them as one product over one input");
    for (int64_t o = 0; o < q->out; ++o) {
      const uint8_t* src = q->codes.data() + o * q->in;
      uint8_t* dst = p.codes.data() + (row0 + o) * (p.in / 2);
      if (p.perm.empty())
        for (int64_t j = 0; j < p.in / 2; ++j) dst[j] = uint8_t((src[2 * j] & 0xF) | (src[2 * j + 1] & 0xF) << 4);
      else  // position i holds input channel perm[i]
        for (int64_t j = 0; j < p.in / 2; ++j)
          dst[j] = uint8_t((src[p.perm[size_t(2 * j)]] & 0xF) | (src[p.perm[size_t(2 * j + 1)]] & 0xF) << 4);
    }
    for (int64_t g = 0; g < n_groups; ++g)
      for (int64_t o = 0; o < q->out; ++o) {
        p.scales[size_t(g * p.out + row0 + o)] = q->scales[size_t(g * q->out + o)];
        p.zeros[size_t(g * p.out + row0 + o)] = float(q->zeros[size_t(g * q->out + o)]);
      }
    row0 += q->out;
  }
}

/// gate|up's rows in down's act order (each half: row i = the matrix's row down.perm[i]); down's
/// perm dropped. Scales and zeros are [groups, out]: their columns move with the rows.
void fold_down_order(PackedQuantLinear& gate_up, PackedQuantLinear& down) {
  const int64_t ffn = down.in, row_bytes = gate_up.in / 2, n_groups = gate_up.in / gate_up.group_size;
  if (gate_up.out != 2 * ffn) throw std::logic_error("fold_down_order: gate|up is not twice down's input");
  const PackedQuantLinear src = gate_up;
  for (int64_t half = 0; half < 2; ++half)
    for (int64_t i = 0; i < ffn; ++i) {
      const int64_t to = half * ffn + i, from = half * ffn + down.perm[size_t(i)];
      std::copy_n(src.codes.begin() + from * row_bytes, row_bytes, gate_up.codes.begin() + to * row_bytes);
      for (int64_t g = 0; g < n_groups; ++g) {
        gate_up.scales[size_t(g * gate_up.out + to)] = src.scales[size_t(g * gate_up.out + from)];
        gate_up.zeros[size_t(g * gate_up.out + to)] = src.zeros[size_t(g * gate_up.out + from)];
      }
    }
  gate_up.row_order = std::move(down.perm);
  down.perm.clear();
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
  for (size_t l = 0; l < layers.size(); ++l) layers[l] = pack_quant_layer(std::span<const QuantLinear, 7>(&linears[l * 7], 7));
  return layers;
}

PackedQuantLayer pack_quant_layer(std::span<const QuantLinear, 7> linears) {
  const QuantLinear* q = linears.data();  // q, k, v, o, gate, up, down
  PackedQuantLayer layer;
  layer[0] = pack_quant_linear({q, q + 1, q + 2});
  layer[1] = pack_quant_linear({q + 3});
  layer[2] = pack_quant_linear({q + 4, q + 5});
  layer[3] = pack_quant_linear({q + 6});
  if (!layer[3].perm.empty() && layer[2].kind == QuantLinear::Kind::int4)
    quant_pack_detail::fold_down_order(layer[2], layer[3]);
  return layer;
}

}  // namespace servelab::cuda
