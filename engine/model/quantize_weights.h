#pragma once
// Quantize on load: a bf16/fp32 model's Linears quantized in memory under a scheme (vLLM's
// `--quantization fp8` on a bf16 checkpoint: dynamic FP8), and the byte counts the simulator
// prices a scheme by.
#include <cstdint>

#include "engine/model/weights.h"

namespace servelab {

/// A copy of `w` whose decoder-layer Linears hold quantize-then-dequantize values under `scheme`
/// (quantize_fp8 / quantize_int4 per matrix; int4_gptq symmetric, int4_awq asymmetric), and
/// w.quant = scheme. Throws std::invalid_argument when `w` is already quantized, or an INT4
/// matrix's input size is not a multiple of the group size.
ModelWeights quantize_weights(const ModelWeights& w, const QuantScheme& scheme);

/// The INT4 group size quantize-on-load uses for `config`: 128, or the largest power of two
/// below it that divides every Linear's input size (the `tiny` preset's FFN of 704 takes 64).
int int4_group_size(const ModelConfig& config);

/// QuantScheme::for_method with the group size int4_group_size(config).
QuantScheme scheme_for_model(Quantization method, const ModelConfig& config, bool fp8_per_channel = false);

/// Bytes of the decoder layers' Linear weights of `config` under `scheme` (codes, scales, zeros),
/// and the same for the unquantized bf16 model: what a step streams from memory for them.
int64_t linear_weight_bytes(const ModelConfig& config, const QuantScheme& scheme);

/// Bytes per Linear weight under `method` for a [out, in] matrix: 2 (bf16), 1 + 4 / in (FP8 with
/// per-channel fp32 scales), 0.5 + (2 + 0.5) / group (INT4 with fp16 scales and 4-bit zeros).
double bytes_per_linear_weight(Quantization method, int64_t in, int group_size = 128);

}  // namespace servelab
