#pragma once
// Private to the cuda backend: one tensor-parallel rank's communicator and the collectives the
// step runs (issue 13). CudaBackend::Impl holds a TpRank* (null on one GPU, where none of this
// runs); cuda_forward.cpp calls tp_all_reduce after the O and down products and tp_lm_head for
// the vocabulary-parallel LM head. Every function here only enqueues on `stream` (capturable into
// a CUDA graph: NCCL collectives are, and so is our all-reduce kernel, kernels/custom_allreduce.h). Built with the backend; the NCCL calls only with
// SERVELAB_HAVE_NCCL (without it, creating a communicator throws).
#include <cuda_runtime.h>

#include <atomic>
#include <stdexcept>
#include <cstdint>
#include <string>

#include "engine/backend/cuda/device_memory.h"
#include "engine/backend/cuda/tp_errors.h"
#include "engine/model/config.h"

namespace servelab::kernels {
class Gemm;
class CustomAllReduce;
}

namespace servelab::cuda {

/// One rank: its NCCL communicator (opaque here: ncclComm_t), its place, and the buffer the LM
/// head's logits are all-gathered through.
struct TpRank {
  void* comm = nullptr;  ///< ncclComm_t
  int rank = 0, n_ranks = 1;
  int vocab = 0;         ///< the whole vocabulary
  int local_vocab = 0;   ///< this rank's LM-head rows (vocab / n_ranks)
  DeviceBuffer gather;   ///< [n_ranks, rows, local_vocab] fp32: the all-gather's output
  int gather_rows = 0;   ///< sampled rows `gather` has room for
  DType dtype = DType::bf16;  ///< the activations' dtype (bf16 or f16): all-reduces and the LM head
  /// The watchdog: communicator set-up, every NCCL call that reports ncclInProgress and every wait
  /// on the rank's stream give up after this many seconds (CudaBackendOptions::tp_timeout_s).
  double timeout_s = 60.0;
  /// Set by any rank that failed (shared by the ranks of one backend): the others stop waiting on
  /// a peer that will never come. May be null (then only the deadline ends a wait).
  const std::atomic<bool>* peer_failed = nullptr;
  /// Our one-shot all-reduce over peer memory (kernels/custom_allreduce.h), shared by the ranks of
  /// one backend, or null (all_reduce: nccl, or f16): tp_all_reduce sends a message of at most
  /// custom_max_bytes through it and larger ones through NCCL.
  kernels::CustomAllReduce* custom = nullptr;
  int64_t custom_max_bytes = 0;
  /// all_reduce: custom: every message through our kernel; one it cannot take (over
  /// custom_max_bytes, f16, unaligned) is an error rather than a silent NCCL call.
  bool custom_only = false;
  /// tp_all_reduce_add_rms_norm may fuse (CudaBackendOptions::tp_fuse_all_reduce_norm).
  bool fuse_add_norm = false;
  /// With fuse_add_norm: row-parallel products that gemv takes store their rows into the peers'
  /// lamport buffers themselves (tp_product_push; CudaBackendOptions::tp_push_from_product).
  bool push_from_product = false;
  /// Our lamport all-reduce (and the fused norm and pushes built on it) in steps enqueued eagerly
  /// too, not only in those captured into CUDA graphs (CudaBackendOptions::tp_lamport_eager).
  bool lamport_eager = false;
  /// The partial sum a product pushed and the fused all-reduce + norm has not yet taken (host
  /// state while a step is enqueued: set by tp_product_push, cleared by tp_all_reduce_add_rms_norm).
  const void* pushed = nullptr;
  /// Diagnosis only (issue 25's GPU test TpGpuDiag): the blocking ncclCommInitRank of the code
  /// before the fix, on the calling thread, with no watchdog.
  bool blocking_init = false;
};

/// True when this servelab was built with NCCL (tensor_parallel > 1 is possible).
bool tp_have_nccl();
/// The NCCL version string ("2.28.3"), or why there is none.
std::string tp_nccl_version();
/// A fresh unique id for ncclCommInitRank (128 bytes), from rank 0's thread.
std::string tp_unique_id();
/// Non-blocking ncclCommInitRankConfig (config.blocking = 0) for the calling thread's current
/// device, then polls ncclCommGetAsyncError until the communicator is ready. Throws TpTimeout (after
/// ncclCommAbort) when set-up has not finished within tp.timeout_s (a rank never joined) or another
/// rank failed meanwhile, std::runtime_error when NCCL reports an error. Sets NCCL_NVLS_ENABLE=0 in
/// the environment first when it is unset (NVLink multicast stays off).
void tp_init_comm(TpRank& tp, const std::string& unique_id);
/// ncclCommFinalize + ncclCommDestroy, bounded by tp.timeout_s (then ncclCommAbort); straight
/// ncclCommAbort when `abort` (a rank failed mid-step and a collective may never finish), which
/// also raises the custom all-reduce's abort word (its waiting kernels end at once).
void tp_destroy_comm(TpRank& tp, bool abort);
/// Waits until `stream` has drained: cudaStreamQuery in a loop that also polls the communicator's
/// asynchronous error and the custom all-reduce's status word. Throws TpTimeout when tp.timeout_s
/// passes first (a collective whose peer never launched it), another rank failed, or a custom
/// all-reduce of this rank gave up waiting for a peer (its kernel ends by itself after tp.timeout_s;
/// the error names the missing rank); std::runtime_error on a CUDA or NCCL error. The caller then
/// aborts the communicators (tp_destroy_comm: a stuck NCCL kernel ends once its communicator is
/// aborted, a waiting custom kernel once its abort word is raised).
void tp_wait_stream(const TpRank& tp, cudaStream_t stream, const char* what);

/// In-place sum over the ranks of `n` values in tp.dtype at `x`: our one-shot kernel when
/// tp.custom is set and the message is at most tp.custom_max_bytes (n % 8 == 0, 16-byte aligned;
/// otherwise NCCL), else ncclAllReduce (ncclSum). Every rank takes the same path for the same n.
void tp_all_reduce(TpRank& tp, void* x, int64_t n, cudaStream_t stream);
/// The all-reduce of a row-parallel product's partial sums delta[rows, d] fused with the residual
/// add and RMSNorm after it (kernels::CustomAllReduce::run_add_rms_norm: h += sum, xn =
/// rms_norm(h) · w, the bits of tp_all_reduce then add_rms_norm) when fusion is on (fuse_add_norm)
/// and our kernel takes the message; false (nothing enqueued) otherwise. Every rank gets the same answer for the same step.
bool tp_all_reduce_add_rms_norm(TpRank& tp, void* delta, void* h, const void* w, void* xn, int rows, int d, float eps,
                                cudaStream_t stream);
/// A row-parallel product y[rows, out] = x · wᵀ (bf16) whose partial sum the fused all-reduce +
/// norm takes next, enqueued with its rows pushed into the peers' lamport buffers from the
/// product's kernel (push_from_product, gemv's shapes; kernels/lamport_push.h): true, and
/// tp.pushed = y. false, nothing enqueued, when it cannot (then run the product as usual).
bool tp_product_push(TpRank& tp, kernels::Gemm& gemm, const void* x, const void* w, void* y, int rows, int out, int in,
                     cudaStream_t stream);
/// True when tp_all_reduce sends `n` values through the custom kernel.
bool tp_uses_custom(const TpRank& tp, const void* x, int64_t n);
/// True when the custom kernel may take its lamport form on `stream`: while a graph is being
/// captured on it, or always with tp.lamport_eager.
bool tp_lamport_ok(const TpRank& tp, cudaStream_t stream);
/// Grows `gather` for `rows` sampled rows (not while capturing: called from ensure_samples).
/// Returns true when it reallocated (graphs that baked the old address in must go).
bool tp_ensure_samples(TpRank& tp, int rows);
/// Extra activation bytes a step of `rows` rows and `samples` sampled rows needs on a rank.
int64_t tp_activation_bytes(const TpRank& tp, int rows, int samples);
/// The vocabulary-parallel LM head: logits of this rank's vocab rows [rank·V/N, (rank+1)·V/N)
/// for the `n` rows of `xs` [n, d] against `lm_head_rows` [V/N, d] (both tp.dtype) into its block of
/// `gather`, an in-place ncclAllGather, then each rank's block copied to its columns of
/// `logits` [n, V] fp32, so every rank holds the whole logits and samples identically.
void tp_lm_head(TpRank& tp, kernels::Gemm& gemm, const void* xs, const void* lm_head_rows, float* logits, int n,
                int d, cudaStream_t stream);

}  // namespace servelab::cuda
