#pragma once
// INT4 weights on the GPU (weight-only, AWQ / GPTQ group quantization) in quant_gemv's layout:
// codes uint8 [rows, cols / 2] (byte j = cols 2j low nibble, 2j + 1 high nibble), scales and
// zeros fp32 [cols / group, rows], w = (q − zero) · scale.
// - quantize_int4_weight: quantize on load from bf16, the formulas of engine/model/quant.h's
//   quantize_int4 (round to nearest; AWQ asymmetric min/max or GPTQ symmetric with zero 8;
//   scales rounded to fp16 as the checkpoints store them), so the codes equal the CPU's.
// - dequantize_int4: codes back to a bf16 [rows, cols] matrix, for products of more rows than
//   quant_gemv takes (then the bf16 GEMM: a first step before a tensor-core INT4 kernel).
#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::kernels {

/// w bf16 [rows, cols] (cols a multiple of group, group a multiple of 2). Synchronous.
void quantize_int4_weight(const void* w, int64_t rows, int cols, int group, bool symmetric, uint8_t* codes,
                          float* scales, float* zeros);

/// out bf16 [rows, cols] = (q − zero) · scale, rounded to bf16.
void dequantize_int4(const uint8_t* codes, const float* scales, const float* zeros, int64_t rows, int cols, int group,
                     void* out, cudaStream_t stream);

}  // namespace servelab::kernels
