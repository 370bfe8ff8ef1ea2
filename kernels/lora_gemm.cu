// LoraGemm (lora_gemm.h): a run's shrink and expand as cuBLASLt products. Row-major
// C[rows, cols] = X[rows, k] · W[cols, k]ᵀ is column-major Cᵀ = W · Xᵀ (as gemm.cu): A = W stored
// [k, cols] and transposed, B = Xᵀ stored [k, rows], D = Cᵀ [cols, rows], any leading dimensions.
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/cublaslt_lib.h"
#include "kernels/gemm_rows.h"
#include "kernels/lora_gemm.h"

#define LORA_CUBLAS_CHECK(call)                                                                    \
  do {                                                                                             \
    const cublasStatus_t st_ = (call);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                              \
      throw std::runtime_error("cuBLASLt status " + std::to_string(int(st_)) + " at " + __FILE__ + \
                               ":" + std::to_string(__LINE__) + ": " #call);                       \
  } while (0)

namespace servelab::kernels {
namespace {

void check_gemm_pool(const LoraPool& p, const LoraRun& run, const char* who) {
  check_lora_pool(p, who);
  if (run.slot < 0 || run.slot >= p.n_slots || run.first < 0 || run.count < 0)
    throw std::invalid_argument(std::string(who) + ": run (slot " + std::to_string(run.slot) + ", first " +
                                std::to_string(run.first) + ", count " + std::to_string(run.count) +
                                ") outside the pool's " + std::to_string(p.n_slots) + " slots");
}

/// The largest power of two (at most 256) dividing the address: cuBLASLt's alignment preference.
int alignment(uintptr_t a) {
  int al = 256;
  while (al > 1 && a % uintptr_t(al) != 0) al /= 2;
  return al;
}
int alignment(const void* p) { return alignment(reinterpret_cast<uintptr_t>(p)); }

struct Layouts {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Layouts(cudaDataType_t type, int m, int n, int k, int ld_a, int ld_b, int ld_d, int batch, int64_t sa, int64_t sb,
          int64_t sd, int sms) {
    LORA_CUBLAS_CHECK(cublaslt().matmul_desc_create(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    LORA_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    LORA_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    if (sms > 0) {
      const int32_t target = sms;
      LORA_CUBLAS_CHECK(
          cublaslt().matmul_desc_set_attribute(op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof(target)));
    }
    LORA_CUBLAS_CHECK(cublaslt().matrix_layout_create(&a, type, k, m, ld_a));
    LORA_CUBLAS_CHECK(cublaslt().matrix_layout_create(&b, type, k, n, ld_b));
    LORA_CUBLAS_CHECK(cublaslt().matrix_layout_create(&d, type, m, n, ld_d));
    if (batch > 1) {
      const int32_t count = batch;
      for (auto [l, stride] : {std::pair{a, sa}, std::pair{b, sb}, std::pair{d, sd}}) {
        LORA_CUBLAS_CHECK(
            cublaslt().matrix_layout_set_attribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        LORA_CUBLAS_CHECK(cublaslt().matrix_layout_set_attribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                 &stride, sizeof(stride)));
      }
    }
  }
  Layouts(const Layouts&) = delete;
  Layouts& operator=(const Layouts&) = delete;
  ~Layouts() {
    if (d) cublaslt().matrix_layout_destroy(d);
    if (b) cublaslt().matrix_layout_destroy(b);
    if (a) cublaslt().matrix_layout_destroy(a);
    if (op) cublaslt().matmul_desc_destroy(op);
  }
};

int64_t elem_bytes(ScalarType) { return 2; }
cudaDataType_t cuda_type(ScalarType t) { return t == ScalarType::bf16 ? CUDA_R_16BF : CUDA_R_16F; }

}  // namespace

struct LoraGemm::Prepared {
  Layouts layouts;
  cublasLtMatmulAlgo_t algo{};
  int n;  ///< the rows (cuBLASLt's columns of B and D) the layouts hold now
  Prepared(cudaDataType_t type, const Shape& s)
      : layouts(type, s.m, s.n, s.k, s.ld_a, s.ld_b, s.ld_d, s.batch, s.stride_a, s.stride_b, s.stride_d, s.sms),
        n(s.n) {}
  /// The layouts for `rows` rows: two attribute writes, no descriptor made or algorithm asked.
  void set_rows(int rows) {
    if (rows == n) return;
    const uint64_t cols = uint64_t(rows);
    LORA_CUBLAS_CHECK(cublaslt().matrix_layout_set_attribute(layouts.b, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
    LORA_CUBLAS_CHECK(cublaslt().matrix_layout_set_attribute(layouts.d, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
    n = rows;
  }
};

LoraGemm::LoraGemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  LORA_CUBLAS_CHECK(cublaslt().create(&handle_));
  if (workspace_bytes_ > 0) CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

LoraGemm::~LoraGemm() {
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublaslt().destroy(handle_);
}

cublasLtMatmulAlgo_t LoraGemm::query(const Prepared& p, const Shape& s, size_t ws, const uint32_t (&align)[4]) {
  cublasLtMatmulPreference_t pref = nullptr;
  LORA_CUBLAS_CHECK(cublaslt().preference_create(&pref));
  LORA_CUBLAS_CHECK(cublaslt().preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const cublasLtMatmulPreferenceAttributes_t attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    LORA_CUBLAS_CHECK(cublaslt().preference_set_attribute(pref, attr[i], &align[i], sizeof(align[i])));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const Layouts& l = p.layouts;
  const cublasStatus_t st = cublaslt().algo_get_heuristic(handle_, l.op, l.a, l.b, l.d, l.d, pref, 1, &result, &found);
  cublaslt().preference_destroy(pref);
  ++heuristic_queries_;
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    throw std::runtime_error("LoraGemm: cuBLASLt has no algorithm for m=" + std::to_string(s.m) + " n=" +
                             std::to_string(s.n) + " k=" + std::to_string(s.k) + " batch " + std::to_string(s.batch));
  return result.algo;
}

LoraGemm::Key LoraGemm::key(ScalarType t, const Shape& s, int n, int al_a, int al_b, int al_d) {
  return Key{int(t), s.m, n, s.k, s.ld_a, s.ld_b, s.ld_d, s.batch, s.stride_a, s.stride_b, s.stride_d,
             int(s.accumulate) | int(s.workspace) << 1 | s.sms << 2, al_a | (al_b << 10) | (al_d << 20)};
}

LoraGemm::Prepared& LoraGemm::prepared(ScalarType t, const Shape& s, int al_a, int al_b, int al_d) {
  const int n_bucket = gemm_rows_bucket(s.n);
  const Key k = key(t, s, n_bucket, al_a, al_b, al_d);
  auto it = buckets_.find(k);
  if (it != buckets_.end()) return *it->second;
  // The shape with the bucket's row count, asked once: every run length of the bucket takes it.
  Shape sb = s;
  sb.n = n_bucket;
  const uint32_t align[4] = {uint32_t(al_a), uint32_t(al_b), uint32_t(al_d), uint32_t(al_d)};
  auto p = std::make_unique<Prepared>(cuda_type(t), sb);
  p->algo = query(*p, sb, sb.workspace ? workspace_bytes_ : 0, align);
  return *buckets_.emplace(k, std::move(p)).first->second;
}

void LoraGemm::matmul(ScalarType t, const Shape& s, float alpha, const void* a, const void* b, void* d,
                      cudaStream_t stream) {
  const int al_a = alignment(a), al_b = alignment(b), al_d = alignment(d);
  // The shrink may split K through the workspace; the expand (K = the rank) takes none, so the
  // two never share it when they run on different streams.
  const size_t ws = s.workspace ? workspace_bytes_ : 0;
  const float beta = s.accumulate ? 1.0f : 0.0f;
  auto launch = [&](const Prepared& p) {
    const Layouts& l = p.layouts;
    return cublaslt().matmul(handle_, l.op, &alpha, a, l.a, b, l.b, &beta, d, l.d, d, l.d, &p.algo,
                             ws ? workspace_ : nullptr, ws, stream);
  };
  const Key own = key(t, s, s.n, al_a, al_b, al_d);
  if (auto o = own_.find(own); o != own_.end()) {
    LORA_CUBLAS_CHECK(launch(*o->second));
    return;
  }
  // The bucket's algorithm at this length: cuBLASLt checks it takes the problem as it launches
  // (no descriptor made and no check asked on the step's path); a length it refuses asks for its own.
  Prepared& p = prepared(t, s, al_a, al_b, al_d);
  p.set_rows(s.n);
  const cublasStatus_t st = launch(p);
  if (st == CUBLAS_STATUS_SUCCESS) return;
  if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) LORA_CUBLAS_CHECK(st);
  if (own_.size() >= 4096) own_.clear();  // run lengths vary: bound the cache
  const uint32_t align[4] = {uint32_t(al_a), uint32_t(al_b), uint32_t(al_d), uint32_t(al_d)};
  auto mine = std::make_unique<Prepared>(cuda_type(t), s);
  mine->algo = query(*mine, s, ws, align);
  LORA_CUBLAS_CHECK(launch(*mine));
  own_.emplace(own, std::move(mine));
}

LoraGemm::Shape LoraGemm::shrink_shape(const LoraPool& pool, int count, int sms) {
  // Cᵀ[total, count] = A[slot] (stored [n_in, total], transposed) · xᵀ [n_in, count].
  const int total = pool.total_rank();
  return Shape{total, count, pool.n_in, pool.n_in, pool.n_in, total, 1, 0, 0, 0, false, true, sms};
}

int LoraGemm::expand_shapes(const LoraPool& pool, int count, int ld_y, bool accumulate, Expand (&out)[kLoraMaxSegments]) {
  const int total = pool.total_rank(), r = pool.max_rank;
  int start[kLoraMaxSegments], width[kLoraMaxSegments];
  bool equal = true;
  for (int m = 0; m < pool.n_seg; ++m) {
    start[m] = m > 0 ? start[m - 1] + width[m - 1] : 0;
    width[m] = (m + 1 < pool.n_seg ? pool.seg_end[m] : pool.n_out) - start[m];
    equal = equal && width[m] == width[0];
  }
  // Segment m: Cᵀ[width, count] += B[slot][its columns] (stored [r, width], transposed) ·
  // xa[:, m · r ..]ᵀ [r, count] (ld total). Segments of equal width: one strided-batched product.
  if (equal && pool.n_seg > 1 && width[0] > 0) {
    out[0] = {Shape{width[0], count, r, r, total, ld_y, pool.n_seg, int64_t(width[0]) * r, r, width[0], accumulate, false},
              0, 0};
    return 1;
  }
  int n = 0;
  for (int m = 0; m < pool.n_seg; ++m)
    if (width[m] > 0) out[n++] = {Shape{width[m], count, r, r, total, ld_y, 1, 0, 0, 0, accumulate, false}, m, start[m]};
  return n;
}

void LoraGemm::prepare(ScalarType t, const LoraPool& pool, int min_rows, int max_rows) {
  check_lora_pool(pool, "LoraGemm::prepare");
  if (pool.n_slots == 0) return;
  // The operands as the backend's steps pass them: a run from row 0 of 256-byte aligned buffers
  // (cudaMalloc's), the slots' A and B at the pool's alignment, y with the product's width as ld.
  const int al_a = alignment(pool.a);
  Expand parts[kLoraMaxSegments];
  for (int rows : gemm_rows_buckets(min_rows, max_rows)) {
    prepared(t, shrink_shape(pool, rows, shrink_sms_), al_a, 256, 256);
    const int n = expand_shapes(pool, rows, pool.n_out, true, parts);
    for (int i = 0; i < n; ++i) {
      const uintptr_t col = uintptr_t(parts[i].start) * 2;  // bytes into B's rows and y's
      prepared(t, parts[i].shape, alignment(reinterpret_cast<uintptr_t>(pool.b) + col * uintptr_t(pool.max_rank)), 256,
               alignment(col));
    }
  }
}

void LoraGemm::shrink(ScalarType t, const void* x, const LoraPool& pool, const LoraRun& run, float scale, void* xa,
                      cudaStream_t stream) {
  check_gemm_pool(pool, run, "LoraGemm::shrink");
  if (run.count == 0) return;
  const int total = pool.total_rank();
  const int64_t eb = elem_bytes(t);
  const auto* a = static_cast<const char*>(pool.a) + int64_t(run.slot) * total * pool.n_in * eb;
  const auto* xr = static_cast<const char*>(x) + int64_t(run.first) * pool.n_in * eb;
  auto* out = static_cast<char*>(xa) + int64_t(run.first) * total * eb;
  matmul(t, shrink_shape(pool, run.count, shrink_sms_), scale, a, xr, out, stream);
}

void LoraGemm::expand(ScalarType t, const void* xa, const LoraPool& pool, const LoraRun& run, void* y, int ld_y, int c0,
                      cudaStream_t stream, bool accumulate) {
  check_gemm_pool(pool, run, "LoraGemm::expand");
  if (run.count == 0) return;
  const int total = pool.total_rank(), r = pool.max_rank;
  const int64_t eb = elem_bytes(t);
  const auto* b = static_cast<const char*>(pool.b) + int64_t(run.slot) * pool.n_out * r * eb;
  const auto* xr = static_cast<const char*>(xa) + int64_t(run.first) * total * eb;
  auto* yr = static_cast<char*>(y) + (int64_t(run.first) * ld_y + c0) * eb;
  Expand parts[kLoraMaxSegments];
  const int n = expand_shapes(pool, run.count, ld_y, accumulate, parts);
  for (int i = 0; i < n; ++i)
    matmul(t, parts[i].shape, 1.0f, b + int64_t(parts[i].start) * r * eb, xr + int64_t(parts[i].seg) * r * eb,
           yr + int64_t(parts[i].start) * eb, stream);
}

}  // namespace servelab::kernels
