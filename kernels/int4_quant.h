#pragma once
// INT4 weights on the GPU (weight-only, AWQ / GPTQ group quantization) in quant_gemv's layout:
// codes uint8 [rows, cols / 2] (byte j = cols 2j low nibble, 2j + 1 high nibble), scales and
// zeros fp32 [cols / group, rows], w = (q − zero) · scale.
// - quantize_int4_weight: quantize on load from bf16, the formulas of engine/model/quant.h's
//   quantize_int4 (round to nearest; AWQ asymmetric min/max or GPTQ symmetric with zero 8;
//   scales rounded to fp16 as the checkpoints store them), so the codes equal the CPU's.
// - dequantize_int4: codes back to a bf16 [rows, cols] matrix, for products of more rows than
//   quant_gemv takes (then the bf16 GEMM: a first step before a tensor-core INT4 kernel).
// - pack_int4_fragments: the codes, scales and zeros repacked once into int4_pack.h's fragment
//   order, which quant_gemv's packed kernel reads.
// - gather_columns: act-order INT4 (GPTQ's g_idx): the codes hold input channel perm[i] at
//   position i, so that each group's channels are contiguous; a product takes x's columns in that
//   order (x[:, perm]) and is then the plain product.
#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::kernels {

/// w bf16 [rows, cols] (cols a multiple of group, group a multiple of 2). Synchronous.
void quantize_int4_weight(const void* w, int64_t rows, int cols, int group, bool symmetric, uint8_t* codes,
                          float* scales, float* zeros);

/// out bf16 [rows, cols] = (q − zero) · scale, rounded to bf16.
void dequantize_int4(const uint8_t* codes, const float* scales, const float* zeros, int64_t rows, int cols, int group,
                     void* out, cudaStream_t stream);

/// Repacks one INT4 matrix (codes [n, k/2], scales / zeros fp32 [k / group, n]) into
/// int4_pack.h's layout: packed_codes (Layout::code_bytes), packed_groups (Layout::group_bytes),
/// both 16-byte aligned. Throws std::invalid_argument when the shape is not packable
/// (Layout::packable). Bit-equal to pack_int4_fragments_ref (kernels/ref/int4_pack_ref.h).
void pack_int4_fragments(const uint8_t* codes, const float* scales, const float* zeros, int n, int k, int group_size,
                         uint8_t* packed_codes, void* packed_groups, cudaStream_t stream);

/// out[r, i] = x[r, perm[i]] for 16-bit x and out [rows, cols] (row stride cols), perm a
/// permutation of 0..cols-1 on the device. Reference: gather_columns_ref (kernels/ref/ops_ref.h).
void gather_columns(const void* x, const int32_t* perm, void* out, int rows, int cols, cudaStream_t stream);

/// out bf16 [n, k] = (q − zero) · scale from the packed layout: the bits dequantize_int4 gives
/// from the row layout (integer zeros).
void dequantize_int4_packed(const uint8_t* packed_codes, const void* packed_groups, int n, int k, int group_size,
                            void* out, cudaStream_t stream);

}  // namespace servelab::kernels
