#pragma once
// Private to the cuda backend: one tensor-parallel rank's communicator and the collectives the
// step runs (issue 13). CudaBackend::Impl holds a TpRank* (null on one GPU, where none of this
// runs); cuda_forward.cpp calls tp_all_reduce after the O and down products and tp_lm_head for
// the vocabulary-parallel LM head. Every function here only enqueues on `stream` (capturable into
// a CUDA graph: NCCL collectives are). Built with the backend; the NCCL calls only with
// SERVELAB_HAVE_NCCL (without it, creating a communicator throws).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "engine/backend/cuda/device_memory.h"
#include "engine/model/config.h"

namespace servelab::kernels {
class Gemm;
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
};

/// True when this servelab was built with NCCL (tensor_parallel > 1 is possible).
bool tp_have_nccl();
/// The NCCL version string ("2.28.3"), or why there is none.
std::string tp_nccl_version();
/// A fresh unique id for ncclCommInitRank (128 bytes), from rank 0's thread.
std::string tp_unique_id();
/// ncclCommInitRank on the calling thread (its current device is the rank's). Sets
/// NCCL_NVLS_ENABLE=0 in the environment first when it is unset (NVLink multicast stays off).
void tp_init_comm(TpRank& tp, const std::string& unique_id);
/// ncclCommDestroy (or ncclCommAbort when `abort`: a rank failed mid-step and the others may be
/// blocked in a collective).
void tp_destroy_comm(TpRank& tp, bool abort);

/// In-place sum over the ranks of `n` values in tp.dtype at `x` (ncclAllReduce, ncclSum).
void tp_all_reduce(TpRank& tp, void* x, int64_t n, cudaStream_t stream);
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
