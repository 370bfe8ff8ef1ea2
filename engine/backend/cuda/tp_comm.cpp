#include "engine/backend/cuda/tp_comm.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#ifdef SERVELAB_HAVE_NCCL
#include <nccl.h>
#endif

#include "kernels/gemm.h"

namespace servelab::cuda {

#ifdef SERVELAB_HAVE_NCCL
namespace {

void nccl_check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess)
    throw std::runtime_error(std::string("NCCL: ") + call + " failed: " + ncclGetErrorString(r) + " (" +
                             ncclGetLastError(nullptr) + ")");
}
#define NCCL_CHECK(call) nccl_check((call), #call)

ncclComm_t comm_of(const TpRank& tp) { return static_cast<ncclComm_t>(tp.comm); }

}  // namespace

bool tp_have_nccl() { return true; }

std::string tp_nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string tp_unique_id() {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // before NCCL reads its environment at all
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof id.internal);
}

void tp_init_comm(TpRank& tp, const std::string& unique_id) {
  // NVLink multicast (NVLS) stays off: the GPU machines require it (KINDS.md); a user's explicit
  // setting is kept.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  ncclUniqueId id;
  if (unique_id.size() != sizeof id.internal) throw std::logic_error("tp_init_comm: malformed NCCL unique id");
  std::copy(unique_id.begin(), unique_id.end(), id.internal);
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, tp.n_ranks, id, tp.rank));
  tp.comm = comm;
}

void tp_destroy_comm(TpRank& tp, bool abort) {
  if (!tp.comm) return;
  if (abort)
    ncclCommAbort(comm_of(tp));
  else
    ncclCommDestroy(comm_of(tp));
  tp.comm = nullptr;
}

void tp_all_reduce(TpRank& tp, void* x, int64_t n, cudaStream_t stream) {
  const ncclDataType_t type = tp.dtype == DType::f16 ? ncclFloat16 : ncclBfloat16;
  NCCL_CHECK(ncclAllReduce(x, x, size_t(n), type, ncclSum, comm_of(tp), stream));
}

void tp_lm_head(TpRank& tp, kernels::Gemm& gemm, const void* xs, const void* lm_head_rows, float* logits, int n,
                int d, cudaStream_t stream) {
  if (n > tp.gather_rows) throw std::logic_error("tp_lm_head: the gather buffer was not grown for the step");
  const size_t block = size_t(n) * tp.local_vocab;  // one rank's [n, V/N]
  float* all = tp.gather.get<float>();
  const auto type = tp.dtype == DType::f16 ? kernels::ScalarType::f16 : kernels::ScalarType::bf16;
  gemm.run(type, xs, lm_head_rows, all + tp.rank * block, n, tp.local_vocab, d, true, stream);
  NCCL_CHECK(ncclAllGather(all + tp.rank * block, all, block, ncclFloat32, comm_of(tp), stream));
  // [rank][row][col] -> [row][rank * V/N + col]
  for (int r = 0; r < tp.n_ranks; ++r)
    CUDA_CHECK(cudaMemcpy2DAsync(logits + size_t(r) * tp.local_vocab, size_t(tp.vocab) * sizeof(float),
                                 all + r * block, size_t(tp.local_vocab) * sizeof(float),
                                 size_t(tp.local_vocab) * sizeof(float), n, cudaMemcpyDeviceToDevice, stream));
}

#else  // no NCCL: a single rank only

namespace {
[[noreturn]] void no_nccl() {
  throw std::runtime_error("backend cuda: tensor_parallel > 1 needs NCCL, and this servelab was built without it "
                           "(nccl.h / libnccl were not found at configure time, or -DSERVELAB_NCCL=OFF)");
}
}  // namespace

bool tp_have_nccl() { return false; }
std::string tp_nccl_version() { return "none (built without NCCL)"; }
std::string tp_unique_id() { no_nccl(); }
void tp_init_comm(TpRank&, const std::string&) { no_nccl(); }
void tp_destroy_comm(TpRank& tp, bool) { tp.comm = nullptr; }
void tp_all_reduce(TpRank&, void*, int64_t, cudaStream_t) { no_nccl(); }
void tp_lm_head(TpRank&, kernels::Gemm&, const void*, const void*, float*, int, int, cudaStream_t) { no_nccl(); }

#endif

bool tp_ensure_samples(TpRank& tp, int rows) {
  if (rows <= tp.gather_rows) return false;
  tp.gather.grow(size_t(rows) * tp.n_ranks * tp.local_vocab * sizeof(float), "the all-gathered logits");
  tp.gather_rows = rows;
  return true;
}

int64_t tp_activation_bytes(const TpRank& tp, int rows, int samples) {
  (void)rows;
  return int64_t(samples) * tp.n_ranks * tp.local_vocab * int64_t(sizeof(float));
}

}  // namespace servelab::cuda
