#pragma once
// Quantized Linear weights: what a checkpoint or quantize-on-load gives one [out, in] matrix
// (FP8 E4M3 codes with per-tensor or per-output-channel scales, or INT4 codes with group-wise
// scales and zero points and an optional act-order group index), the scheme a whole model runs
// under (QuantScheme), and the plain math of both directions. Checkpoint layouts (AWQ, GPTQ,
// compressed-tensors) live in quant_checkpoint.h; this file is format-independent.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace servelab {

/// The weight format a model's Linear layers run in (`quantization:` in a scenario).
enum class Quantization { none, fp8, int4_awq, int4_gptq };
const char* to_string(Quantization q);  ///< "none", "fp8", "int4_awq", "int4_gptq"
/// Throws std::invalid_argument listing the values.
Quantization parse_quantization(const std::string& s);

/// Where an FP8 weight keeps its scales.
enum class Fp8WeightScales { per_tensor, per_channel };
/// How activations entering a quantized Linear are quantized (FP8 W8A8; INT4 is weight-only).
/// dynamic: scale = amax / 448 computed from each step's values (per tensor: the whole step's
/// rows; per token: each row); static: the checkpoint's input_scale.
enum class ActivationQuant { none, fp8_per_tensor, fp8_per_token, fp8_static };
const char* to_string(Fp8WeightScales s);   ///< "per_tensor", "per_channel"
const char* to_string(ActivationQuant a);   ///< "none", "fp8_per_tensor", "fp8_per_token", "fp8_static"

/// The four activation inputs of a decoder layer's Linears, in forward order (Q/K/V share the
/// normed input, gate/up share theirs), each with one static FP8 scale.
enum LinearInput { kInputQkv = 0, kInputO = 1, kInputGateUp = 2, kInputDown = 3 };

/// How a model's Linears are quantized. The embedding, norms and LM head stay unquantized, as
/// vLLM and the checkpoints' "ignore": ["lm_head"] leave them.
struct QuantScheme {
  Quantization method = Quantization::none;
  Fp8WeightScales fp8_scales = Fp8WeightScales::per_tensor;  ///< fp8
  ActivationQuant activations = ActivationQuant::none;       ///< fp8: W8A8; int4: none
  int group_size = 128;         ///< int4: input channels per scale/zero group; -1 = all of them
  bool act_order = false;       ///< int4_gptq: g_idx permutes input channels into groups
  bool gptq_v1 = true;          ///< int4_gptq: zeros stored minus one (checkpoint_format "gptq")
  /// int4 read from compressed-tensors' "pack-quantized" tensors (weight_packed, weight_scale,
  /// weight_zero_point, weight_g_idx: quant_pack.h) rather than GPTQ's; `method` is int4_gptq.
  bool pack_quantized = false;
  /// fp8_static: [layer][LinearInput] input scale (the largest of a fused input's Linears).
  std::vector<std::array<float, 4>> input_scales;

  bool quantized() const { return method != Quantization::none; }
  /// "fp8 (per-channel weights, per-token dynamic activations)", "int4_awq (group 128)".
  std::string describe() const;
  /// The scheme `--quantization` asks for when quantizing on load: fp8 is vLLM's dynamic FP8
  /// (per-tensor weight scales, per-tensor dynamic activation scales) unless `per_channel`
  /// (per-channel weights, per-token activations, as compressed-tensors' FP8-Dynamic); int4 is
  /// group-128 round-to-nearest with zero points in AWQ's or GPTQ's convention.
  static QuantScheme for_method(Quantization method, bool per_channel = false);
};

/// One quantized [out, in] weight matrix (row-major, as Hugging Face stores nn.Linear), codes
/// unpacked one per byte.
///   fp8:  w[o][k] = fp8(codes[o·in + k]) · scales[per_channel ? o : 0]
///   int4: w[o][k] = (codes[o·in + k] − zeros[g][o]) · scales[g][o], g = g_idx[k] (or k / group)
struct QuantLinear {
  enum class Kind { fp8_e4m3, int4 };
  Kind kind = Kind::fp8_e4m3;
  int64_t out = 0, in = 0;
  std::vector<uint8_t> codes;    ///< [out, in]: E4M3 bits, or 0..15
  std::vector<float> scales;     ///< fp8: [1] or [out]; int4: [n_groups, out]
  std::vector<uint8_t> zeros;    ///< int4: [n_groups, out], 0..15 (16: a GPTQ v1 stored 15)
  std::vector<int32_t> g_idx;    ///< int4: [in] group of each input channel; empty = k / group_size
  int group_size = 128;          ///< int4
  float input_scale = 0.0f;      ///< fp8 static activation scale, 0 when dynamic

  int64_t n_groups() const { return kind == Kind::int4 ? (in + group_size - 1) / group_size : 0; }
  int group_of(int64_t k) const { return g_idx.empty() ? static_cast<int>(k / group_size) : g_idx[k]; }
  /// Bytes the checkpoints store: codes (1 byte or ½ a byte a weight), fp32 FP8 scales, fp16
  /// INT4 scales, packed 4-bit zeros and int32 g_idx.
  int64_t storage_bytes() const;
  /// Throws std::invalid_argument naming the field when sizes or values disagree.
  void validate() const;
};

/// FP8 E4M3 with scale = amax / 448 over the tensor or each output row (vLLM's
/// scaled_fp8_quant), codes rounded to nearest even. An all-zero row gets scale 1.
QuantLinear quantize_fp8(const float* w, int64_t out, int64_t in, Fp8WeightScales scales);

/// INT4 round-to-nearest per group of input channels: asymmetric (AWQ's pseudo_quantize: scale =
/// (max − min) / 15, zero = clamp(round(−min / scale), 0, 15)) or symmetric (GPTQ's sym: scale =
/// 2·amax / 15, zero = 8); q = clamp(round(w / scale) + zero, 0, 15). Scales are rounded to fp16
/// first, as the checkpoints store them. With g_idx (act order) the groups are g_idx's, not runs
/// of consecutive channels. No error feedback: GPTQ's Hessian update and AWQ's activation-aware
/// channel scaling need calibration data, which quantize-on-load does not have.
QuantLinear quantize_int4(const float* w, int64_t out, int64_t in, int group_size, bool symmetric,
                          const std::vector<int32_t>& g_idx = {});

/// The fp32 matrix a quantized one stands for, [out, in].
std::vector<float> dequantize(const QuantLinear& q);

/// Quantize-dequantize activation rows in place: x [rows, cols] as FP8 with one scale (the
/// whole block's amax / 448, or `static_scale` when > 0) or one per row.
void fake_quant_fp8_rows(float* x, int64_t rows, int64_t cols, ActivationQuant mode, float static_scale = 0.0f);

}  // namespace servelab
