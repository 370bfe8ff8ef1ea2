#pragma once
// Plain C++ references of the FP8 W8A8 prefill path (kernels/fp8_quant.h, kernels/fp8_gemm.h):
// dynamic activation quantization and the scaled E4M3 product, double loops.
#include <cstdint>

namespace servelab::kernels {

/// x [m, k] (the tests round it through bf16 first) to E4M3 codes [m, k] and row scales [m]:
/// scale = amax / 448 over all rows (per_token false) or each row, 1 when the amax is 0;
/// code = E4M3(x · (1 / scale)), round to nearest even, saturating at ±448 (engine/model/fp8.h).
void fp8_quantize_rows_ref(const float* x, int m, int k, bool per_token, uint8_t* codes, float* scales);

/// The same with one fixed scale for every row (static activations: a checkpoint's input_scale):
/// scales[r] = scale, code = E4M3(x · (1 / scale)), saturating at ±448.
void fp8_quantize_rows_fixed_ref(const float* x, int m, int k, float scale, uint8_t* codes, float* scales);

/// y[i][j] = x_scales[i] · w_scales[j] · Σ_k fp8(x[i][k]) · fp8(w[j][k]), accumulated in double.
void fp8_gemm_ref(const uint8_t* x, const float* x_scales, const uint8_t* w, const float* w_scales, float* y, int m,
                  int n, int k);

}  // namespace servelab::kernels
