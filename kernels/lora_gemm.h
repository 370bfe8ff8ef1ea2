#pragma once
// Multi-LoRA on the tensor cores for runs of rows of one adapter (kernels/lora_runs.h): a prefill's
// or a chunk's rows all share their sequence's adapter, so its delta y += scale · (x · Aᵀ) · Bᵀ is
// two thin GEMMs per run instead of the grouped CUDA-core kernels' 8-row tiles (lora_sgmv.h):
//   shrink: xa[run, total_rank] = scale · x[run, n_in] · A[slot]ᵀ   (16-bit xa, one GEMM for every
//           segment of a fused q|k|v or gate|up: A[slot] stacks their ranks)
//   expand: y[run, seg] += xa[run, seg's ranks] · B[slot][seg's columns]ᵀ   (beta = 1; the
//           segments of equal width in one strided-batched GEMM, else one GEMM each)
// cuBLASLt (loaded as Gemm loads it: cublaslt_lib.h), bf16 or fp16 operands, fp32 accumulation.
// xa is rounded to 16 bits once (the grouped kernels keep it in fp32): within the backend's bf16
// tolerance. Same pool layout as lora.h (LoraPool). Eager steps only: the run lengths are the
// host's, so a CUDA graph (decode) keeps the grouped kernels.
// Reference: kernels/ref/lora_ref.h (lora_shrink_ref, then lora_expand_segments_ref).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "kernels/lora.h"
#include "kernels/lora_runs.h"

namespace servelab::kernels {

/// Owns a cuBLASLt handle and the shrink's workspace, caches the algorithm per shape and
/// alignment. One stream at a time uses the shrink's workspace (the expand takes none).
class LoraGemm {
 public:
  explicit LoraGemm(size_t workspace_bytes = size_t(4) << 20);
  ~LoraGemm();
  LoraGemm(const LoraGemm&) = delete;
  LoraGemm& operator=(const LoraGemm&) = delete;

  /// xa[run.first + i, :total_rank] = scale · Σ_k x[run.first + i, k] · A[run.slot, :, k] for the
  /// run's rows (xa: 16-bit, row stride pool.total_rank(); x: row stride pool.n_in). Throws
  /// std::invalid_argument for a bad pool (as lora_shrink) or a run outside the pool's slots.
  void shrink(ScalarType t, const void* x, const LoraPool& pool, const LoraRun& run, float scale, void* xa,
              cudaStream_t stream);
  /// y[run.first + i, c0 + c] += Σ_k xa[run.first + i, m · max_rank + k] · B[run.slot, c, k] for
  /// c < pool.n_out (m: c's segment), y 16-bit with row stride ld_y. accumulate = false: y = the
  /// delta alone (beta 0: a scratch whose consumer adds it, as LoraHook::delta).
  void expand(ScalarType t, const void* xa, const LoraPool& pool, const LoraRun& run, void* y, int ld_y, int c0,
              cudaStream_t stream, bool accumulate = true);
  /// Asks cuBLASLt now, rather than inside the step that first meets a run length, for the
  /// algorithm of every row bucket (gemm_rows.h) from min_rows to max_rows of this pool's shrink
  /// and accumulating expand, with the operands as the backend passes them (a run from row 0 of
  /// 256-byte aligned buffers, y of the pool's width). A serving run's prompts come in hundreds of
  /// lengths: each new bucket met inside a step asked cuBLASLt there, on the step's time.
  void prepare(ScalarType t, const LoraPool& pool, int min_rows, int max_rows);
  /// Times cuBLASLt's heuristic was asked: once per row bucket (gemm_rows.h: a run's length is its
  /// prompt's, new at almost every prefill in a serving run), shape and alignment; a run length
  /// the bucket's algorithm does not take asks for its own.
  int64_t heuristic_queries() const { return heuristic_queries_; }
  /// The shrinks launched from now on are asked of cuBLASLt for this many SMs (0: every SM): the
  /// SMs a product beside them leaves free (Gemm::set_sm_reserve). Each count has its own algorithms.
  void set_shrink_sms(int sms) { shrink_sms_ = sms < 0 ? 0 : sms; }

 private:
  /// One product in cuBLASLt's column-major terms: D[m, n] (ld_d) = alpha · op(A)[m, k] · B[k, n] +
  /// beta · D, A transposed (stored [k, m] with ld_a), `batch` products strided by the strides.
  struct Shape {
    int m, n, k, ld_a, ld_b, ld_d, batch;
    int64_t stride_a, stride_b, stride_d;
    bool accumulate;  ///< beta 1 (else 0)
    bool workspace;   ///< may split K through the workspace (the shrinks; never the expands)
    int sms = 0;      ///< CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET (0: none set)
  };
  /// A row bucket's descriptors and algorithm, made once: the 32 layers of a step and every run
  /// length of the bucket reuse them (its layouts' row count set per call: no descriptor made and
  /// no algorithm checked on the step's path; cuBLASLt checks the problem as it launches).
  struct Prepared;
  /// An expand's product: its shape, its segment (xa's ranks from seg · max_rank; 0 for the
  /// strided batch of equal segments) and its first column.
  struct Expand {
    Shape shape;
    int seg, start;
  };
  static Shape shrink_shape(const LoraPool& pool, int count, int sms = 0);
  /// The expand's products for `count` rows (into out; returns how many).
  static int expand_shapes(const LoraPool& pool, int count, int ld_y, bool accumulate, Expand (&out)[kLoraMaxSegments]);
  // (type, m, n, k, ld_a, ld_b, ld_d, batch, strides, beta and workspace, alignments)
  using Key = std::tuple<int, int, int, int, int, int, int, int, int64_t, int64_t, int64_t, int, int>;
  static Key key(ScalarType t, const Shape& s, int n, int al_a, int al_b, int al_d);
  /// The descriptors and algorithm of the shape's row bucket (gemm_rows.h) for operands of these
  /// alignments, made and asked on first use.
  Prepared& prepared(ScalarType t, const Shape& s, int al_a, int al_b, int al_d);
  void matmul(ScalarType t, const Shape& s, float alpha, const void* a, const void* b, void* d, cudaStream_t stream);
  cublasLtMatmulAlgo_t query(const Prepared& p, const Shape& s, size_t ws, const uint32_t (&align)[4]);
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Prepared>> buckets_;  ///< by the shape with n its row bucket
  std::map<Key, std::unique_ptr<Prepared>> own_;      ///< run lengths their bucket's algorithm refused
  int64_t heuristic_queries_ = 0;
  int shrink_sms_ = 0;
};

}  // namespace servelab::kernels
