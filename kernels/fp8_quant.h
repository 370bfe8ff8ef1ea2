#pragma once
// FP8 E4M3 quantization on the GPU, the two halves of a W8A8 product's inputs:
// - activations, per step (dynamic, as vLLM's scaled_fp8_quant): bf16 rows to E4M3 codes with
//   scale = amax / 448 over the whole step (per tensor) or over each row (per token), or a fixed
//   scale (static: a checkpoint's input_scale; values past 448 · scale saturate), codes =
//   round-to-nearest-even(x · (1 / scale)) saturated at ±448: the bits fake_quant_fp8_rows
//   (engine/model/quant.h) rounds to on the CPU;
// - weights, once at load (quantize on load, vLLM's `--quantization fp8` on a bf16 checkpoint):
//   a bf16 [rows, cols] matrix to codes with one scale per row, or one per run of rows (a fused
//   Q|K|V or gate|up matrix keeps each HF matrix's per-tensor scale), as quantize_fp8 does.
// References: kernels/ref/fp8_gemm_ref.h (activations), engine/model/quant.h (weights).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace servelab::kernels {

enum class Fp8ActScales { per_tensor, per_token, fixed };

struct Fp8QuantizeArgs {
  const void* x = nullptr;      ///< bf16 [m, x_stride]
  int64_t x_stride = 0;         ///< elements between rows of x (>= k)
  int m = 0, k = 0;
  Fp8ActScales scales = Fp8ActScales::per_tensor;
  uint8_t* codes = nullptr;     ///< [m, k] E4M3
  float* row_scales = nullptr;  ///< [m]: each row's scale (per tensor: the step's one scale in every row)
  float* amax = nullptr;        ///< per tensor: one float of scratch (zeroed and written on the stream)
  float fixed_scale = 0.0f;     ///< fixed: the scale (> 0, finite), written into every row's scale
};

/// Throws std::invalid_argument naming the field (k a multiple of 8, x_stride a multiple of 8, a
/// fixed scale > 0 and finite).
void validate(const Fp8QuantizeArgs& a);
/// Per token and fixed one launch; per tensor a memset and two launches (row amax, then the codes).
void quantize_fp8_activations(const Fp8QuantizeArgs& a, cudaStream_t stream);

/// Weight quantization at load: w bf16 [rows, cols] to codes [rows, cols] and scales [rows].
/// `runs` lists consecutive row counts summing to rows, each quantized with one scale (its amax /
/// 448, 1 when zero); per_channel ignores runs and gives each row its own. Synchronous.
void quantize_fp8_weight(const void* w, int64_t rows, int64_t cols, const std::vector<int64_t>& runs,
                         bool per_channel, uint8_t* codes, float* scales);

}  // namespace servelab::kernels
