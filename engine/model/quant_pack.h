#pragma once
// The int32 packings of 4-bit checkpoints, eight 4-bit values a word, value i in bits 4i..4i+3.
// AutoAWQ (GEMM version) stores the weight transposed and packs along the output dimension in
// the interleaved order AWQ_ORDER = {0, 2, 4, 6, 1, 3, 5, 7}: nibble i of word (k, c) holds
// output column 8c + AWQ_ORDER[i]:
//   qweight int32 [in, out/8], qzeros int32 [n_groups, out/8], scales fp16 [n_groups, out].
// GPTQ (AutoGPTQ / GPTQModel, checkpoint_format "gptq") packs the weight along the input
// dimension and the zeros along the output, both in plain order, and stores each zero minus one
// (v1's offset; "gptq_v2" stores it as is):
//   qweight int32 [in/8, out], qzeros int32 [n_groups, out/8], scales fp16 [n_groups, out],
//   g_idx int32 [in].
// compressed-tensors' "pack-quantized" (llm-compressor's W4A16) packs the weight along the input
// dimension in plain order, unsigned (the signed value plus 8), the zero points (asymmetric only)
// along the output dimension, and keeps the weight's [out, in] orientation:
//   weight_packed int32 [out, in/8], weight_scale [out, n_groups], weight_zero_point int32
//   [out/8, n_groups], weight_g_idx int32 [in] (act order), weight_shape [2] = {out, in}.
// w = (q − zp) · scale with q and zp signed: (code − zero) · scale with code = q + 8 and zero =
// zp + 8 (8 when symmetric), this engine's QuantLinear as it is.
#include <cstdint>
#include <vector>

#include "engine/model/quant.h"

namespace servelab {

/// AutoAWQ's nibble order within a word.
inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

/// Packs rows × cols values 0..15 ([rows, cols], cols a multiple of 8) along cols: word (r, c)
/// holds values (r, 8c + order[i]) in nibble i. order = {0..7} for GPTQ's zeros.
std::vector<int32_t> pack_cols(const uint8_t* values, int64_t rows, int64_t cols, const int* order);
/// The inverse of pack_cols: [rows, cols] values 0..15.
std::vector<uint8_t> unpack_cols(const int32_t* words, int64_t rows, int64_t cols, const int* order);

/// The AutoAWQ tensors of an int4 weight (asymmetric, consecutive groups; out % 8 == 0).
struct AwqTensors {
  std::vector<int32_t> qweight;  ///< [in, out/8]
  std::vector<int32_t> qzeros;   ///< [n_groups, out/8]
  std::vector<float> scales;     ///< [n_groups, out], fp16 on disk
};
AwqTensors pack_awq(const QuantLinear& q);
/// Throws std::invalid_argument when the sizes do not fit [out, in] and group_size.
QuantLinear unpack_awq(const AwqTensors& t, int64_t out, int64_t in, int group_size);

/// The GPTQ tensors of an int4 weight (in % 8 == 0, out % 8 == 0).
struct GptqTensors {
  std::vector<int32_t> qweight;  ///< [in/8, out]
  std::vector<int32_t> qzeros;   ///< [n_groups, out/8], each zero − 1 when v1
  std::vector<float> scales;     ///< [n_groups, out], fp16 on disk
  std::vector<int32_t> g_idx;    ///< [in]
};
/// v1 = true: zeros stored minus one (a zero of 0 cannot be stored; the symmetric zero 8 can).
GptqTensors pack_gptq(const QuantLinear& q, bool v1 = true);
QuantLinear unpack_gptq(const GptqTensors& t, int64_t out, int64_t in, int group_size, bool v1 = true);

/// The compressed-tensors pack-quantized tensors of an int4 weight (in % 8 == 0; out % 8 == 0 with
/// zero points).
struct CtInt4Tensors {
  std::vector<int32_t> weight_packed;      ///< [out, in/8]
  std::vector<float> weight_scale;         ///< [out, n_groups], the model's dtype on disk
  std::vector<int32_t> weight_zero_point;  ///< [out/8, n_groups]; empty when symmetric (every zero 8)
  std::vector<int32_t> weight_g_idx;       ///< [in]; empty without act order
};
/// symmetric: no zero points stored (every zero must be 8: std::invalid_argument otherwise).
CtInt4Tensors pack_ct_int4(const QuantLinear& q, bool symmetric);
/// Throws std::invalid_argument when the sizes do not fit [out, in] and group_size.
QuantLinear unpack_ct_int4(const CtInt4Tensors& t, int64_t out, int64_t in, int group_size);

}  // namespace servelab
