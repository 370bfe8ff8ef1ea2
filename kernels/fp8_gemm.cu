// Fp8Gemm (fp8_gemm.h) over cuBLASLt. Row-major y[M, N] = x[M, K] · w[N, K]ᵀ is column-major
// yᵀ = w · xᵀ: A = w (K x N, transposed), B = x (K x M), C = D = y (N x M) — the "TN" layout
// cuBLASLt's FP8 kernels require. cuBLASLt's M is our N, so A's outer-vector scales are w's
// channel scales [n] and B's are x's row scales [m].
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/cublaslt_lib.h"
#include "kernels/fp8_gemm.h"
#include "kernels/gemm_rows.h"

#define FP8_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                             \
    const cublasStatus_t st_ = (call);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                              \
      throw std::runtime_error("cuBLASLt (fp8) status " + std::to_string(int(st_)) + " at " +      \
                               __FILE__ + ":" + std::to_string(__LINE__) + ": " #call);            \
  } while (0)

namespace servelab::kernels {
namespace fp8_gemm_detail {

/// The descriptors of one product; scale pointers are set per call (they are not part of the
/// algorithm's choice, only the scale mode is).
struct Fp8Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  Fp8Descs(int m, int n, int k, bool vec) {
    FP8_CUBLAS_CHECK(cublaslt().matmul_desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    FP8_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    FP8_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    const int32_t mode = vec ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    FP8_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
    FP8_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
    FP8_CUBLAS_CHECK(cublaslt().matrix_layout_create(&a, CUDA_R_8F_E4M3, k, n, k));
    FP8_CUBLAS_CHECK(cublaslt().matrix_layout_create(&b, CUDA_R_8F_E4M3, k, m, k));
    FP8_CUBLAS_CHECK(cublaslt().matrix_layout_create(&c, CUDA_R_16BF, n, m, n));
  }
  void set_scales(const float* a_scale, const float* b_scale) {
    FP8_CUBLAS_CHECK(
        cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
    FP8_CUBLAS_CHECK(
        cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
  }
  ~Fp8Descs() {
    if (c) cublaslt().matrix_layout_destroy(c);
    if (b) cublaslt().matrix_layout_destroy(b);
    if (a) cublaslt().matrix_layout_destroy(a);
    if (op) cublaslt().matmul_desc_destroy(op);
  }
  Fp8Descs(const Fp8Descs&) = delete;
  Fp8Descs& operator=(const Fp8Descs&) = delete;
};

/// The fallback for a cuBLASLt without outer-vector scales: y[i][j] *= x_scales[i] · w_scales[j]
/// after an unscaled product (one more bf16 rounding).
__global__ void scale_outer_kernel(__nv_bfloat16* y, const float* x_scales, const float* w_scales, int m, int n) {
  const int64_t total = int64_t(m) * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n;
    y[i] = __float2bfloat16_rn(__bfloat162float(y[i]) * x_scales[r] * w_scales[i - r * n]);
  }
}

}  // namespace fp8_gemm_detail

void validate(const Fp8GemmArgs& a) {
  auto bad = [](const std::string& what) { return std::invalid_argument("fp8 gemm: " + what); };
  if (a.m < 0 || a.n < 8 || a.n % 8)
    throw bad("n (" + std::to_string(a.n) + ") must be a positive multiple of 8 and m >= 0");
  if (a.k < 16 || a.k % 16) throw bad("k (" + std::to_string(a.k) + ") must be a positive multiple of 16");
  if (!a.x || !a.w || !a.y || !a.x_scales || !a.w_scales) throw bad("x, w, y and both scales must be set");
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!aligned(a.x) || !aligned(a.w) || !aligned(a.y)) throw bad("x, w and y must be 16-byte aligned");
}

Fp8Gemm::Fp8Gemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  FP8_CUBLAS_CHECK(cublaslt().create(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Fp8Gemm::~Fp8Gemm() {
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublaslt().destroy(handle_);
}

cublasLtMatmulAlgo_t Fp8Gemm::heuristic(int m, int n, int k, bool vec) {
  const auto key = std::make_tuple(m, n, k, vec);
  if (auto it = heuristics_.find(key); it != heuristics_.end()) return it->second;
  fp8_gemm_detail::Fp8Descs d(m, n, k, vec);
  cublasLtMatmulPreference_t pref = nullptr;
  FP8_CUBLAS_CHECK(cublaslt().preference_create(&pref));
  FP8_CUBLAS_CHECK(cublaslt().preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublaslt().algo_get_heuristic(handle_, d.op, d.a, d.b, d.c, d.c, pref, 1, &result, &found);
  cublaslt().preference_destroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    throw std::runtime_error("fp8 gemm: cuBLASLt has no FP8 algorithm for M=" + std::to_string(m) + " N=" +
                             std::to_string(n) + " K=" + std::to_string(k) + " with " +
                             (vec ? "outer-vector" : "scalar") + " scales (status " + std::to_string(int(st)) +
                             "; outer-vector scales need cuBLAS >= 12.9 on sm_90 or newer)");
  heuristics_.emplace(key, result.algo);
  return result.algo;
}

cublasLtMatmulAlgo_t Fp8Gemm::algo_for(int m, int n, int k, bool vec) {
  const auto key = std::make_tuple(m, n, k, vec);
  if (auto it = algos_.find(key); it != algos_.end()) return it->second;
  const int m_key = gemm_rows_bucket(m);
  cublasLtMatmulAlgo_t algo = heuristic(m_key, n, k, vec);
  if (m != m_key) {  // the bucket's algorithm must take the actual row count
    fp8_gemm_detail::Fp8Descs d(m, n, k, vec);
    cublasLtMatmulHeuristicResult_t check{};
    if (cublaslt().algo_check(handle_, d.op, d.a, d.b, d.c, d.c, &algo, &check) != CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > workspace_bytes_)
      algo = heuristic(m, n, k, vec);
  }
  algos_.emplace(key, algo);
  return algo;
}

void Fp8Gemm::prepare(int min_m, int max_m, int n, int k, bool vector_scales) {
  for (int m : gemm_rows_buckets(min_m, max_m)) {
    if (vector_scales && !outer_vec_unsupported_) {
      try {
        heuristic(m, n, k, true);
        continue;
      } catch (const std::runtime_error&) {
        outer_vec_unsupported_ = true;
      }
    }
    heuristic(m, n, k, false);
  }
}

void Fp8Gemm::run(const Fp8GemmArgs& a, cudaStream_t stream) {
  validate(a);
  if (a.m == 0) return;
  bool vec = !(a.x_uniform && a.w_uniform);
  if (vec && !outer_vec_unsupported_) {
    try {
      algo_for(a.m, a.n, a.k, true);
    } catch (const std::runtime_error&) {  // this cuBLASLt has no outer-vector FP8 kernels here
      outer_vec_unsupported_ = true;
    }
  }
  const bool epilogue = vec && outer_vec_unsupported_;
  if (epilogue) vec = false;
  const cublasLtMatmulAlgo_t algo = algo_for(a.m, a.n, a.k, vec);
  fp8_gemm_detail::Fp8Descs d(a.m, a.n, a.k, vec);
  if (!epilogue) d.set_scales(a.w_scales, a.x_scales);  // A = w, B = x
  const float alpha = 1.0f, beta = 0.0f;
  FP8_CUBLAS_CHECK(cublaslt().matmul(handle_, d.op, &alpha, a.w, d.a, a.x, d.b, &beta, a.y, d.c, a.y, d.c, &algo,
                                     workspace_, workspace_bytes_, stream));
  if (epilogue) {
    const int64_t total = int64_t(a.m) * a.n;
    const int blocks = int(std::min<int64_t>((total + 255) / 256, 4096));
    fp8_gemm_detail::scale_outer_kernel<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(a.y), a.x_scales,
                                                                    a.w_scales, a.m, a.n);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace servelab::kernels
