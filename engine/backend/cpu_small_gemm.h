#pragma once
// The CPU backend's dense layers for a few rows (decode batches): out (+)= in · Wᵀ by our own
// SIMD loop instead of OpenBLAS's sgemm. sgemm packs the weight before multiplying, which for a
// handful of rows costs more than the product: on the 2-core VM (OpenBLAS 0.3.21, SkylakeX
// kernels, cold 17 MB weights) 2 rows cost 2.3x one row's sgemv. This loop streams each weight
// row once from memory and multiplies it into every input row held in cache: 0.50-0.77 of
// sgemm's time at 2-8 rows and about sgemv's at one (scripts/cpu-gemm-bench.sh). Each output is
// one dot product in a fixed order (lanes, a tree over them, then the tail), so a row's result
// does not depend on how many rows share the call.
#include <string>

namespace servelab {

/// Largest row count the small-rows loop takes; above it OpenBLAS's packed sgemm is as fast or
/// faster (crossover at 12 rows on the VM).
inline constexpr int kSmallGemmMaxRows = 11;

/// The instruction set the small-rows loop runs on this CPU: "avx512", "avx2", or "" where it
/// has neither (AVX-512F; AVX2 with FMA).
const std::string& small_gemm_isa();

/// out[r, j] = Σ_i in[r, i] · w[j, i] (+ out[r, j] when accumulate), r < rows, j < n_cols; in is
/// [rows, n_in] dense, w n_cols rows of n_in, out row stride ldo. False (nothing written) when
/// small_gemm_isa() is empty or rows is outside [1, kSmallGemmMaxRows].
bool small_rows_gemm_nt(const float* in, int rows, int n_in, const float* w, int n_cols, float* out, int ldo,
                        bool accumulate);

/// The loops themselves, one per instruction set (cpu_small_gemm_avx512.cpp, _avx2.cpp: each
/// file compiled for its set, called only where the CPU has it).
void small_rows_gemm_avx512(const float* in, int rows, int n_in, const float* w, int n_cols, float* out, int ldo,
                            bool accumulate);
void small_rows_gemm_avx2(const float* in, int rows, int n_in, const float* w, int n_cols, float* out, int ldo,
                          bool accumulate);

}  // namespace servelab
