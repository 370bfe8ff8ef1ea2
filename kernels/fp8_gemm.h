#pragma once
// FP8 E4M3 matrix products for prefill (W8A8), through cuBLASLt: y[M, N] bf16 = (x[M, K] ·
// w[N, K]ᵀ) scaled by x's row scales and w's row (output channel) scales, fp32 accumulation.
// x comes from quantize_fp8_activations (fp8_quant.h), w from quantize_fp8_weight or a checkpoint.
// Scales: when both are uniform (one per-tensor scale each) cuBLASLt takes them as scalars
// (CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F); otherwise as outer vectors (..._OUTER_VEC_32F,
// cuBLAS >= 12.9 on sm_90): y[i][j] = x_scales[i] · w_scales[j] · Σ_k x[i][k] w[j][k]. A cuBLASLt
// without them gets an unscaled product and a scaling kernel (outer_vec_unsupported()).
// Reference: kernels/ref/fp8_gemm_ref.h.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace servelab::kernels {

struct Fp8GemmArgs {
  const uint8_t* x = nullptr;     ///< E4M3 [m, k]
  const float* x_scales = nullptr;  ///< [m] (all equal when x_uniform)
  bool x_uniform = true;
  const uint8_t* w = nullptr;     ///< E4M3 [n, k]
  const float* w_scales = nullptr;  ///< [n] (all equal when w_uniform)
  bool w_uniform = true;
  void* y = nullptr;              ///< bf16 [m, n]
  int m = 0, n = 0, k = 0;
};

/// Throws std::invalid_argument naming the field: k a positive multiple of 16, n a multiple of 8,
/// x, w and y 16-byte aligned, every pointer set.
void validate(const Fp8GemmArgs& a);

/// Owns a cuBLASLt handle and workspace and caches the algorithm per (row bucket, n, k, scale
/// mode), as Gemm does (gemm_rows.h). One stream at a time.
class Fp8Gemm {
 public:
  explicit Fp8Gemm(size_t workspace_bytes = size_t(32) << 20);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  void run(const Fp8GemmArgs& a, cudaStream_t stream);
  /// Asks cuBLASLt now for every row bucket from min_m to max_m rows (no heuristic in a step).
  void prepare(int min_m, int max_m, int n, int k, bool vector_scales);
  /// Whether this cuBLASLt lacked outer-vector FP8 scales, so that run() applies them in a second
  /// kernel after an unscaled product (one more bf16 rounding); found on the first such product.
  bool outer_vec_unsupported() const { return outer_vec_unsupported_; }

 private:
  cublasLtMatmulAlgo_t algo_for(int m, int n, int k, bool vec);
  cublasLtMatmulAlgo_t heuristic(int m, int n, int k, bool vec);
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool outer_vec_unsupported_ = false;
  std::map<std::tuple<int, int, int, bool>, cublasLtMatmulAlgo_t> algos_;       // per actual M
  std::map<std::tuple<int, int, int, bool>, cublasLtMatmulAlgo_t> heuristics_;  // per queried M
};

}  // namespace servelab::kernels
