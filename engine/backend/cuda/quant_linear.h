#pragma once
// Quantized decoder Linears on the GPU (issue 26; docs/quantization.md): the weights in their
// format, and the product cuda_ops.h's Linear and GateUpSilu dispatch to when a layer has them.
// - fp8: codes E4M3 [out, in] and fp32 scales [out] (per output channel, or each HF matrix's
//   per-tensor scale repeated over its rows: a fused Q|K|V keeps three). Products of at most
//   gemv_max_rows rows take quant_gemv on bf16 activations (W8A16: the bytes are the decode win);
//   more rows quantize the activations to E4M3 (dynamic, per tensor or per token as the scheme
//   says, or static: the checkpoint's input_scale, the fused Linears' largest) and take the FP8
//   GEMM (W8A8, fp8_gemm.h).
// - int4 (AWQ asymmetric or GPTQ symmetric, groups along the input): codes [out, in / 2] and
//   fp32 scales and zeros [in / group, out] (with SERVELAB_QUANT_GEMV=packed, repacked at load into
//   the mma fragments' order instead: pack_int4_linears). Up to gemv_max_rows rows quant_gemv (the
//   packed kernel in launches of up to 8 rows); more rows dequantize into a bf16 scratch matrix
//   and take the bf16 GEMM. Act order (GPTQ's g_idx, quant_pack.h): the codes' positions are the
//   input channels sorted by group, and every product first gathers x's columns in that order
//   into a scratch (kernels::gather_columns), then runs as above.
// default_gemv_rows() is the measured fastest split between the two per format (docs/quantization.md).
// Plain C++ over the kernels' launch functions (no device code here).
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/cuda/cuda_weights.h"
#include "engine/backend/cuda/device_memory.h"
#include "engine/backend/cuda/quant_pack.h"
#include "engine/model/quant.h"
#include "kernels/fp8_gemm.h"
#include "kernels/gemm.h"
#include "kernels/quant_gemv.h"

namespace servelab::cuda {

/// One quantized [out, in] matrix on the device (pointers into QuantDeviceWeights::storage).
struct QuantWeight {
  QuantLinear::Kind kind = QuantLinear::Kind::fp8_e4m3;
  const uint8_t* codes = nullptr;  ///< fp8 [out, in]; int4 [out, in / 2], low nibble = even k
  const float* scales = nullptr;   ///< fp8 [out]; int4 [in / group, out]
  const float* zeros = nullptr;    ///< int4 [in / group, out]
  /// int4 in kernels/int4_pack.h's fragment layout (quant_gemv's packed kernel). When set, codes,
  /// scales and zeros are null: a loaded INT4 model keeps only this layout (see pack_int4_linears).
  const uint8_t* packed_codes = nullptr;
  const void* packed_groups = nullptr;
  /// int4 act order: position i of a row's codes is input channel perm[i] (null: channel i)
  const int32_t* perm = nullptr;
  bool uniform_scales = false;     ///< fp8: every row has the same scale (one per-tensor scale)
  float input_scale = 0.0f;        ///< fp8: the static activation scale (0: dynamic, per the scheme)
  int group_size = 128;            ///< int4
  int out = 0, in = 0;
};

/// A model's quantized decoder Linears, per layer in the forward's fused shapes.
struct QuantDeviceWeights {
  struct Layer {
    QuantWeight qkv, o, gate_up, down;
  };
  QuantScheme scheme;
  DeviceBuffer storage;
  std::vector<Layer> layers;
  int64_t bytes = 0;  ///< codes, scales and zeros
};

/// Quantize on load (vLLM's `--quantization fp8` on a bf16 checkpoint; round-to-nearest INT4):
/// each HF matrix of w's decoder layers quantized as engine/model/quantize_weights.h does on the
/// CPU (the same codes and scales, from the same bf16 values), then w's bf16 Linears are freed
/// (w.storage is rebuilt with the embedding, norms, biases and LM head only; w.bytes shrinks).
/// Throws std::invalid_argument for what the GPU path does not run: weight-only fp8, static
/// activation scales or an act order (quantize on load has neither), f16 storage, shapes the
/// kernels refuse.
QuantDeviceWeights quantize_device_weights(DeviceWeights& w, const QuantScheme& scheme);

/// A quantized checkpoint's Linears as stored (quant_pack.h: packed on the host from
/// ModelWeights::quant_linears) copied into the same layout, then w's bf16 Linears freed as above.
/// The same refusals, and std::invalid_argument when a packed Linear does not fit the model.
QuantDeviceWeights upload_quant_weights(DeviceWeights& w, const QuantScheme& scheme,
                                        const std::vector<PackedQuantLayer>& layers);

/// Both loaders end here. With SERVELAB_QUANT_GEMV=packed, an INT4 model whose Linears all have K
/// and groups that are multiples of 128 is repacked on the GPU into the fragment layout
/// (kernels/int4_pack.h) and its row layout freed (q.storage rebuilt, q.bytes the packed bytes:
/// the same size); otherwise (the default: auto keeps the steps kernel, measured faster) nothing
/// changes. True when repacked.
bool pack_int4_linears(QuantDeviceWeights& q);

/// The scratch and product objects the quantized Linears of one backend share; one stream.
class QuantLinearRunner {
 public:
  /// max_out, max_in: the largest Linear (int4's bf16 scratch holds one dequantized matrix).
  /// gemv_max_rows: products of up to this many rows take quant_gemv (1..kGemvRows; 0: the
  /// format's default_gemv_rows).
  QuantLinearRunner(const QuantScheme& scheme, int max_out, int max_in, int gemv_max_rows = 0);
  /// The most rows quant_gemv takes by default for the scheme's format: where it beats the FP8
  /// GEMM (fp8) or dequantize + bf16 GEMM (int4), kernel_bench --quant-only on an H200.
  static int default_gemv_rows(const QuantScheme& scheme);
  int gemv_max_rows() const { return gemv_max_rows_; }
  /// Activation codes and scales (fp8), or the act order's gathered activations, for steps of up
  /// to `rows` rows (call outside graph capture; a reallocation means the backend's graphs must
  /// be captured again).
  bool reserve(int rows);
  /// Device bytes of the scratch for steps of `rows` rows (gpu_memory_utilization's accounting).
  int64_t scratch_bytes(int rows) const;
  /// cuBLASLt's FP8 algorithms for every row bucket above quant_gemv's up to max_rows.
  void prepare(int max_rows, const QuantWeight& w);
  /// y bf16 [rows, w.out] = x bf16 [rows, w.in] · dequant(w)ᵀ.
  void run(const QuantWeight& w, const void* x, void* y, int rows, kernels::Gemm& gemm, cudaStream_t stream);
  /// act bf16 [rows, ffn] = silu(gate) · up of w = [gate; up] (w.out = 2 · ffn) in one quant_gemv
  /// (its steps kernel), the bits of run() then kernels::silu_mul. False (nothing launched) where
  /// that kernel does not take the product (more rows than quant_gemv or 8, INT4 groups that are
  /// not a multiple of 128, SERVELAB_QUANT_GEMV naming another kernel).
  bool run_gate_up_silu(const QuantWeight& w, const void* x, void* act, int rows, int ffn, cudaStream_t stream);
  /// The q|k|v product with RoPE and the K/V write in quant_gemv's epilogue (QuantGemvArgs::rope),
  /// where the steps kernel takes it (decode rows); false, nothing enqueued, otherwise.
  bool run_qkv_rope_kv(const QuantWeight& w, const kernels::QkvArgs& qa, const void* x, cudaStream_t stream);
  /// The most rows quant_gemv takes (decode); the FP8 GEMM or int4's dequantize + GEMM above.
  static constexpr int kGemvRows = 16;

 private:
  kernels::QuantGemvArgs gemv_args(const QuantWeight& w, const void* x, void* y, int rows) const;
  /// x, or with w's act order x's columns gathered into the codes' order (launched on stream).
  const void* in_codes_order(const QuantWeight& w, const void* x, int rows, cudaStream_t stream);
  QuantScheme scheme_;
  int max_in_ = 0;
  int rows_capacity_ = 0;
  int gemv_max_rows_ = kGemvRows;
  std::unique_ptr<kernels::Fp8Gemm> fp8_;
  DeviceBuffer act_codes_, act_scales_, amax_, dequant_;
  DeviceBuffer gathered_;  // act order: x's columns in the codes' order, [rows_capacity_, max_in_] bf16
  DeviceBuffer gemv_partials_, gemv_counters_;  // quant_gemv's split-K workspace
  int64_t gemv_partial_floats_ = 0;
  int gemv_counter_count_ = 0;
};

}  // namespace servelab::cuda
