#pragma once
// A quantized checkpoint's decoder Linears (ModelWeights::quant_linears: codes, scales and zeros
// as the checkpoint stores them) packed into the cuda backend's layouts (quant_linear.h), in plain
// C++ so the packing is built and tested without a GPU (tests/cuda_backend/quant_pack_test.cpp).
// Per layer the Linears are fused as the forward runs them: q|k|v, o, gate|up, down.
//   fp8:  codes [out, in] E4M3 (the HF matrices' rows one after another) and fp32 scales [out]:
//         per-channel scales concatenated, a per-tensor scale repeated over its matrix's rows;
//   int4: codes [out, in / 2], byte j of a row = positions 2j (low nibble) and 2j + 1 (high
//         nibble); fp32 scales and zeros [in / group, out], each group row the matrices' columns
//         in turn. Position i is input channel i, or with act order (GPTQ's g_idx not k / group)
//         input channel perm[i]: the channels sorted by group, so a group is `group` consecutive
//         positions, and the product takes x's columns in that order (kernels::gather_columns,
//         or the norm before q|k|v and gate|up writing x so; down's order goes into gate|up's
//         rows, row_order).
//   fp8 static activation scales: input_scale, the largest of the fused Linears' (one input, one
//         scale, as vLLM and the cpu backend take it).
// What the GPU kernels do not take is refused by name: an act order whose groups do not each hold
// `group` inputs, fused Linears whose act orders differ or that mix static and dynamic FP8 input
// scales, groups that do not divide every input.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/config.h"
#include "engine/model/quant.h"

namespace servelab::cuda {

/// One fused Linear on the host, in the device layout.
struct PackedQuantLinear {
  QuantLinear::Kind kind = QuantLinear::Kind::fp8_e4m3;
  int out = 0, in = 0, group_size = 128;
  bool uniform_scales = false;  ///< fp8: one scale for every row
  float input_scale = 0.0f;     ///< fp8: the static activation scale (0: dynamic)
  std::vector<uint8_t> codes;
  std::vector<float> scales, zeros;
  std::vector<int32_t> perm;  ///< int4 act order: position i holds input channel perm[i]; empty: i
  /// gate|up over an act-order down: each half's rows in down's order (row i of a half is the
  /// matrix's row row_order[i], so SiLU·mul writes down's input in its codes' order and down's
  /// perm is dropped); empty: the matrices' order. A LoRA image takes the same order
  /// (pack_lora_image's ffn_order).
  std::vector<int32_t> row_order;
};

/// q|k|v, o, gate|up, down of one layer.
using PackedQuantLayer = std::array<PackedQuantLinear, 4>;

/// Fuses `parts` (matrices with the same input, in output order) into one PackedQuantLinear.
/// Throws std::invalid_argument naming what the GPU path cannot run.
PackedQuantLinear pack_quant_linear(const std::vector<const QuantLinear*>& parts);

/// One layer's seven Linears (q, k, v, o, gate, up, down: kQuantLinearNames' order) fused as the
/// forward runs them. Where down has an act order and gate|up is INT4, gate|up's rows take down's
/// order (row_order) and down's perm is dropped: the product before SiLU·mul does the gather.
PackedQuantLayer pack_quant_layer(std::span<const QuantLinear, 7> linears);

/// Every layer of `linears` (ModelWeights::quant_linears of `config`: [layer * 7 + j]).
std::vector<PackedQuantLayer> pack_quant_layers(const ModelConfig& config, const std::vector<QuantLinear>& linears);

}  // namespace servelab::cuda
