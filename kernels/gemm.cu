// cuBLASLt wrapper: row-major y[M, N] = x[M, K] · w[N, K]ᵀ is column-major yᵀ = w · xᵀ, i.e.
// A = w (K x N, transposed), B = x (K x M), C = D = y (N x M), all leading dimensions packed.
// Products of at most gemv_rows() rows (with a LoRA epilogue gemv::kMaxM) go to run_gemv (gemv.cu) unless turned off or batch-invariant.
// cuBLASLt is called through cublaslt() (cublaslt_lib.h): loaded when the first Gemm is made.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/cublaslt_lib.h"
#include "kernels/gemm.h"
#include "kernels/gemm_rows.h"

#define CUBLAS_CHECK(call)                                                                         \
  do {                                                                                             \
    const cublasStatus_t st_ = (call);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                              \
      throw std::runtime_error("cuBLASLt status " + std::to_string(int(st_)) + " at " + \
                               __FILE__ + ":" + std::to_string(__LINE__) + ": " #call);            \
  } while (0)

namespace servelab::kernels {
namespace {

/// Row count the batch-invariant algorithm is chosen for (then used for every M).
constexpr int kCanonicalRows = 256;

struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  /// sms > 0: the product is asked for that many SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET).
  Descs(ScalarType t, int m, int n, int k, bool out_fp32, int sms = 0) {
    const cudaDataType_t in = t == ScalarType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const cudaDataType_t out = out_fp32 ? CUDA_R_32F : in;
    CUBLAS_CHECK(cublaslt().matmul_desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    if (sms > 0) {
      const int32_t target = sms;
      CUBLAS_CHECK(
          cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof(target)));
    }
    CUBLAS_CHECK(cublaslt().matrix_layout_create(&a, in, k, n, k));
    CUBLAS_CHECK(cublaslt().matrix_layout_create(&b, in, k, m, k));
    CUBLAS_CHECK(cublaslt().matrix_layout_create(&c, out, n, m, n));
  }
  ~Descs() {
    if (c) cublaslt().matrix_layout_destroy(c);
    if (b) cublaslt().matrix_layout_destroy(b);
    if (a) cublaslt().matrix_layout_destroy(a);
    if (op) cublaslt().matmul_desc_destroy(op);
  }
};

}  // namespace

bool fp16_kernels_built() {
#if defined(SERVELAB_KERNELS_FP16)
  return true;
#else
  return false;
#endif
}

Gemm::Gemm(bool batch_invariant, size_t workspace_bytes, bool use_gemv, bool gemv_split_k)
    : workspace_bytes_(workspace_bytes), batch_invariant_(batch_invariant), use_gemv_(use_gemv), gemv_split_k_(gemv_split_k) {
  CUBLAS_CHECK(cublaslt().create(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&n_sms_, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaMalloc(&gemv_partials_, 2 * kGemvPartialFloats * sizeof(float)));  // two column tiles
  CUDA_CHECK(cudaMalloc(&gemv_counters_, 2 * kGemvCounters * sizeof(int32_t)));
  CUDA_CHECK(cudaMemset(gemv_counters_, 0, 2 * kGemvCounters * sizeof(int32_t)));
  CUDA_CHECK(cudaDeviceSynchronize());  // zeroed before any stream (non-blocking ones too) runs gemv
  gemv_blocks_per_sm();  // cached now, so that no run() inside a graph capture is the first to ask
}

Gemm::~Gemm() {
  if (gemv_counters_) cudaFree(gemv_counters_);
  if (gemv_partials_) cudaFree(gemv_partials_);
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublaslt().destroy(handle_);
}

bool Gemm::uses_gemv(ScalarType t, const void* x, const void* w, int m, int n, int k, bool lora) const {
  return use_gemv_ && !batch_invariant_ && m <= (lora ? gemv::kMaxM : gemv_rows_) && gemv_supported(t, x, w, m, n, k);
}

std::optional<gemv::Plan> Gemm::taken_gemv_plan(ScalarType t, const void* x, const void* w, int m, int n, int k,
                                                bool lora) const {
  if (!uses_gemv(t, x, w, m, n, k, lora)) return std::nullopt;
  const gemv::Plan plan = gemv_plan(n, k);
  if (!gemv_split_k_ && plan.splits != 1) return std::nullopt;
  return plan;
}

bool Gemm::fuses_gate_up_silu(ScalarType t, const void* x, const void* w, int m, int ffn, int k, bool lora) const {
  return ffn >= 1 && taken_gemv_plan(t, x, w, m, 2 * ffn, k, lora).has_value();
}

void Gemm::run_gate_up_silu(ScalarType t, const void* x, const void* w, void* act, int m, int ffn, int k,
                            cudaStream_t stream, const LoraInGemv* lora) {
  if (m == 0) return;
  const std::optional<gemv::Plan> plan = ffn >= 1 ? taken_gemv_plan(t, x, w, m, 2 * ffn, k, lora != nullptr) : std::nullopt;
  if (!plan) throw std::logic_error("Gemm::run_gate_up_silu: this product does not take the fused gemv path");
  run_gemv_silu_mul(t, x, w, act, m, ffn, k, *plan, gemv_partials_, gemv_counters_, stream, lora);
}

bool Gemm::run_gemv_lora(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k,
                         const LoraInGemv& lora, cudaStream_t stream) {
  const std::optional<gemv::Plan> plan = m > 0 ? taken_gemv_plan(t, x, w, m, n, k, true) : std::nullopt;
  if (!plan) return false;
  run_gemv(t, x, w, y, m, n, k, false, false, *plan, gemv_partials_, gemv_counters_, stream, LamportPush{}, &lora);
  return true;
}

bool Gemm::run_qkv_rope_kv(const QkvArgs& a, const void* x, const void* w, int k, cudaStream_t stream,
                           const LoraInGemv* lora) {
  const int n = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
  if (a.n_tokens == 0 || !gemv_rope_kv_supported(a, x, w, k)) return false;
  const std::optional<gemv::Plan> plan = taken_gemv_plan(a.dtype, x, w, a.n_tokens, n, k, lora != nullptr);
  if (!plan) return false;
  run_gemv_rope_kv(a, x, w, k, *plan, gemv_partials_, gemv_counters_, stream, lora);
  return true;
}

gemv::Plan Gemm::gemv_plan(int n, int k) const {
  // waves = 0: split only products of fewer row blocks than half the multiprocessors (a target of
  // n_sms / 2 blocks: n_sms / 4 "multiprocessors" holding 2 blocks, one wave).
  const gemv::Plan plan0 = gemv_waves_ > 0 ? gemv::make_plan(n, k, n_sms_, gemv_blocks_per_sm(), kGemvCounters,
                                                             kGemvPartialFloats, gemv_waves_)
                                           : gemv::make_plan(n, k, std::max(1, n_sms_ / 4), 2, kGemvCounters,
                                                             kGemvPartialFloats, 1);
  gemv::Plan plan = plan0;
  plan.variant = gemv_variant_;
  return plan;
}

int Gemm::fastest(ScalarType t, int m, int n, int k, bool out_fp32, const cublasLtMatmulAlgo_t* algos, int count,
                  double* first_over_best) {
  const size_t xb = size_t(m) * k * 2, wb = size_t(n) * k * 2, yb = size_t(m) * n * (out_fp32 ? 4 : 2);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (xb + wb + yb + (size_t(256) << 20) > free_b) return -1;  // leave 256 MB to the rest
  char* buf = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, xb + wb + yb));
  CUDA_CHECK(cudaMemset(buf, 0x11, xb + wb));  // small normal numbers, no NaN or denormal paths
  cudaStream_t st = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  Descs d(t, m, n, k, out_fp32, sm_target());
  const float alpha = 1.0f, beta = 0.0f;
  auto launch = [&](int i) {
    return cublaslt().matmul(handle_, d.op, &alpha, buf + xb, d.a, buf, d.b, &beta, buf + xb + wb, d.c, buf + xb + wb,
                             d.c, &algos[i], workspace_, workspace_bytes_, st);
  };
  constexpr int kRounds = 3, kCalls = 5;
  std::vector<double> best(size_t(count), 1e30);
  std::vector<bool> ok(size_t(count), true);
  for (int i = 0; i < count; ++i) ok[size_t(i)] = launch(i) == CUBLAS_STATUS_SUCCESS;  // warm-up
  for (int r = 0; r < kRounds; ++r)
    for (int j = 0; j < count; ++j) {
      const int i = r % 2 ? count - 1 - j : j;  // odd rounds backwards: no candidate always first
      if (!ok[size_t(i)]) continue;
      CUDA_CHECK(cudaEventRecord(e0, st));
      for (int c = 0; c < kCalls; ++c) ok[size_t(i)] = ok[size_t(i)] && launch(i) == CUBLAS_STATUS_SUCCESS;
      CUDA_CHECK(cudaEventRecord(e1, st));
      CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best[size_t(i)] = std::min(best[size_t(i)], double(ms));
    }
  CUDA_CHECK(cudaStreamSynchronize(st));
  cudaEventDestroy(e1);
  cudaEventDestroy(e0);
  cudaStreamDestroy(st);
  cudaFree(buf);
  int pick = 0;
  for (int i = 1; i < count; ++i)
    if (ok[size_t(i)] && best[size_t(i)] < best[size_t(pick)]) pick = i;
  if (!ok[0]) return pick;  // the first failed: whatever ran
  *first_over_best = best[0] / best[size_t(pick)];
  return pick;
}

cublasLtMatmulAlgo_t Gemm::heuristic(ScalarType t, int m, int n, int k, bool out_fp32, bool tune) {
  const auto key = std::make_tuple(int(t), m, n, k, out_fp32, false, sm_target());
  if (auto it = heuristics_.find(key); it != heuristics_.end()) return it->second;
  Descs d(t, m, n, k, out_fp32, sm_target());
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublaslt().preference_create(&pref));
  CUBLAS_CHECK(cublaslt().preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                    sizeof(workspace_bytes_)));
  if (batch_invariant_) {  // no split-K: every output sums its K products in one fixed order
    const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    CUBLAS_CHECK(cublaslt().preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme,
                                                      sizeof(scheme)));
  }
  const bool autotune = tune && !batch_invariant_ && m <= autotune_max_m_;
  cublasLtMatmulHeuristicResult_t results[kAutotuneCandidates]{};
  int found = 0;
  const cublasStatus_t st = cublaslt().algo_get_heuristic(handle_, d.op, d.a, d.b, d.c, d.c, pref,
                                                          autotune ? kAutotuneCandidates : 1, results, &found);
  cublaslt().preference_destroy(pref);
  ++heuristic_queries_;
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    throw std::runtime_error("Gemm: cuBLASLt has no algorithm for M=" + std::to_string(m) + " N=" + std::to_string(n) +
                             " K=" + std::to_string(k));
  cublasLtMatmulAlgo_t algo = results[0].algo;
  if (autotune && found > 1) {
    cublasLtMatmulAlgo_t algos[kAutotuneCandidates];
    for (int i = 0; i < found; ++i) algos[i] = results[i].algo;
    double gain = 1.0;
    const int pick = fastest(t, m, n, k, out_fp32, algos, found, &gain);
    if (pick < 0) {
      ++autotune_stats_.skipped;
    } else {
      algo = algos[pick];
      ++autotune_stats_.tuned;
      autotune_stats_.changed += pick != 0;
      autotune_stats_.gain_sum += gain;
    }
  }
  heuristics_.emplace(key, algo);
  return algo;
}

bool Gemm::accepts(const cublasLtMatmulAlgo_t& algo, ScalarType t, int m, int n, int k, bool out_fp32) const {
  Descs actual(t, m, n, k, out_fp32, sm_target());
  cublasLtMatmulHeuristicResult_t check{};
  return cublaslt().algo_check(handle_, actual.op, actual.a, actual.b, actual.c, actual.c, &algo, &check) ==
             CUBLAS_STATUS_SUCCESS &&
         check.workspaceSize <= workspace_bytes_;
}

cublasLtMatmulAlgo_t Gemm::algo_for(ScalarType t, int m, int n, int k, bool out_fp32, bool accumulate) {
  const auto key = std::make_tuple(int(t), m, n, k, out_fp32, accumulate, sm_target());
  if (auto it = algos_.find(key); it != algos_.end()) return it->second;
  // Batch-invariant: one algorithm, chosen for a canonical row count, for every M. Otherwise the
  // algorithm of m's bucket (gemm_rows.h), or m's own when that one does not take m rows.
  const int m_key = batch_invariant_ ? kCanonicalRows : gemm_rows_bucket(m);
  cublasLtMatmulAlgo_t algo = heuristic(t, m_key, n, k, out_fp32);
  if (m != m_key && !accepts(algo, t, m, n, k, out_fp32)) {
    if (batch_invariant_)
      throw std::runtime_error("Gemm: batch-invariant algorithm (chosen for M=" + std::to_string(m_key) +
                               ") does not support M=" + std::to_string(m) + " N=" + std::to_string(n) +
                               " K=" + std::to_string(k));
    algo = heuristic(t, m, n, k, out_fp32);
  }
  algos_.emplace(key, algo);
  return algo;
}

void Gemm::prepare(ScalarType t, int max_m, int n, int k, bool out_fp32) {
  if (batch_invariant_) {
    heuristic(t, kCanonicalRows, n, k, out_fp32);
    return;
  }
  // Products gemv takes never ask cuBLASLt (its choice does not depend on the pointers' alignment
  // beyond what every weight and activation buffer here has: 16 bytes).
  const bool gemv = uses_gemv(t, workspace_, workspace_, 1, n, k) && (gemv_split_k_ || gemv_plan(n, k).splits == 1);
  for (int m : gemm_rows_buckets(gemv ? gemv_rows_ + 1 : 1, max_m)) heuristic(t, m, n, k, out_fp32, true);
}

void Gemm::run(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k, bool out_fp32,
               cudaStream_t stream, bool accumulate) {
  if (m == 0 || run_if_gemv(t, x, w, y, m, n, k, out_fp32, accumulate, LamportPush{}, stream)) return;
  const cublasLtMatmulAlgo_t algo = algo_for(t, m, n, k, out_fp32, accumulate);
  Descs d(t, m, n, k, out_fp32, sm_target());
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublaslt().matmul(handle_, d.op, &alpha, w, d.a, x, d.b, &beta, y, d.c, y, d.c, &algo, workspace_,
                              workspace_bytes_, stream));
}

bool Gemm::run_if_gemv(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k, bool out_fp32,
                       bool accumulate, const LamportPush& push, cudaStream_t stream) {
  const std::optional<gemv::Plan> plan = taken_gemv_plan(t, x, w, m, n, k);
  if (!plan) return false;
  run_gemv(t, x, w, y, m, n, k, out_fp32, accumulate, *plan, gemv_partials_, gemv_counters_, stream, push);
  return true;
}

bool Gemm::run_pushed(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k, const LamportPush& push,
                      cudaStream_t stream) {
  return m > 0 && t == ScalarType::bf16 && run_if_gemv(t, x, w, y, m, n, k, false, false, push, stream);
}

}  // namespace servelab::kernels
