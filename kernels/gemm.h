#pragma once
// Matrix products through cuBLASLt: y[M, N] = x[M, K] · w[N, K]ᵀ with bf16 (or fp16) operands,
// fp32 accumulation, and a bf16/fp16 or fp32 output (fp32 for logits).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "kernels/attention.h"

namespace servelab::kernels {

/// Owns a cuBLASLt handle and workspace, and caches the algorithm chosen per shape.
/// batch_invariant: split-K is disallowed and one algorithm, chosen for a canonical row count,
/// serves every M, so a row's result does not depend on how many rows share the product.
class Gemm {
 public:
  explicit Gemm(bool batch_invariant = false, size_t workspace_bytes = 32u << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// y = x · wᵀ (+ y when accumulate). out_fp32 selects a float output.
  void run(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k, bool out_fp32,
           cudaStream_t stream, bool accumulate = false);

 private:
  cublasLtMatmulAlgo_t algo_for(ScalarType t, int m, int n, int k, bool out_fp32, bool accumulate);
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool batch_invariant_ = false;
  std::map<std::tuple<int, int, int, int, bool, bool>, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace servelab::kernels
