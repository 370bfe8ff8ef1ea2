#include "engine/model/quantize_weights.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/model/quant_checkpoint.h"
#include "engine/model/tensors.h"

namespace servelab {

ModelWeights quantize_weights(const ModelWeights& w, const QuantScheme& scheme) {
  if (w.quant.quantized())
    throw std::invalid_argument("the weights are already quantized (" + w.quant.describe() +
                                "); quantize on load starts from bf16, f16 or f32 weights");
  ModelWeights q = w;
  q.quant = scheme;
  if (!scheme.quantized()) return q;
  for (const TensorSpec& s : tensor_specs(w.config)) {
    if (!is_quantized_linear(s.name)) continue;
    std::vector<float>& m = tensor_storage(q, s.name);
    const int64_t out = s.shape[0], in = s.shape[1];
    QuantLinear ql;
    if (scheme.method == Quantization::fp8) {
      ql = quantize_fp8(m.data(), out, in, scheme.fp8_scales);
    } else {
      const int group = scheme.group_size > 0 ? scheme.group_size : static_cast<int>(in);
      if (in % group != 0)
        throw std::invalid_argument(s.name + ": in_features " + std::to_string(in) + " is not a multiple of the int4 group size " +
                                    std::to_string(group));
      ql = quantize_int4(m.data(), out, in, group, scheme.method == Quantization::int4_gptq);
    }
    m = dequantize(ql);
  }
  return q;
}

int int4_group_size(const ModelConfig& c) {
  int group = 128;
  while (group > 1 && (c.hidden_size % group != 0 || c.intermediate_size % group != 0 ||
                       (int64_t(c.n_heads) * c.head_dim()) % group != 0))
    group /= 2;
  return group;
}

QuantScheme scheme_for_model(Quantization method, const ModelConfig& config, bool fp8_per_channel) {
  QuantScheme s = QuantScheme::for_method(method, fp8_per_channel);
  if (method == Quantization::int4_awq || method == Quantization::int4_gptq) s.group_size = int4_group_size(config);
  return s;
}

double bytes_per_linear_weight(Quantization method, int64_t in, int group_size) {
  const double group = group_size > 0 ? group_size : static_cast<double>(in);
  switch (method) {
    case Quantization::none: return 2.0;
    case Quantization::fp8: return 1.0 + 4.0 / static_cast<double>(in);
    case Quantization::int4_awq:
    case Quantization::int4_gptq: return 0.5 + 2.5 / group;
  }
  return 2.0;
}

int64_t linear_weight_bytes(const ModelConfig& c, const QuantScheme& scheme) {
  double bytes = 0.0;
  for (const TensorSpec& s : tensor_specs(c))
    if (is_quantized_linear(s.name))
      bytes += static_cast<double>(s.numel()) * bytes_per_linear_weight(scheme.method, s.shape[1], scheme.group_size);
  return static_cast<int64_t>(bytes);
}

}  // namespace servelab
