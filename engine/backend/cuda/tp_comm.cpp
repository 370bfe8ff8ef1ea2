#include "engine/backend/cuda/tp_comm.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#ifdef SERVELAB_HAVE_NCCL
#include <nccl.h>
#endif

#include "kernels/custom_allreduce.h"
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

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_of(const TpRank& tp) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(tp.timeout_s));
}

std::string who(const TpRank& tp) {
  return "rank " + std::to_string(tp.rank) + " of " + std::to_string(tp.n_ranks);
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

/// ncclCommAbort, bounded: on its own thread, waited for at most `seconds`. An abort stuck inside
/// the driver is left behind (the communicator leaks) rather than hanging the caller.
void bounded_abort(ncclComm_t comm, double seconds, const std::string& what) {
  if (!comm) return;
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  std::thread([comm, done] {
    ncclCommAbort(comm);
    done->set_value();
  }).detach();
  if (f.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready)
    std::fprintf(stderr, "servelab: ncclCommAbort of %s did not return within %g s; the communicator is left behind\n",
                 what.c_str(), seconds);
}

/// Polls the (non-blocking) communicator until the operation in flight is done: ncclSuccess
/// returns, an NCCL error throws std::runtime_error, the deadline or a peer's failure TpTimeout.
/// `idle`: sleep between polls (set-up, which takes ~0.1-1 s) rather than yield (enqueues).
void nccl_poll(const TpRank& tp, ncclComm_t comm, const char* what, bool idle) {
  const Clock::time_point deadline = deadline_of(tp);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) nccl_check(state, what);
    if (tp.peer_failed && tp.peer_failed->load(std::memory_order_relaxed))
      throw TpPeerFailed(std::string("NCCL: ") + what + " on " + who(tp) + " given up: another rank failed");
    if (Clock::now() > deadline)
      throw TpTimeout(std::string("NCCL: ") + what + " on " + who(tp) + " did not finish within " +
                      seconds_str(tp.timeout_s) + " s (a rank never joined, or it is stuck); communicators aborted");
    if (idle)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    else
      std::this_thread::yield();
  }
}

/// A call on the non-blocking communicator: ncclInProgress means NCCL is still working on it in the
/// background (set-up, a lazy connection): poll it to the end under the watchdog.
void nccl_call(const TpRank& tp, ncclResult_t r, const char* what) {
  if (r == ncclInProgress)
    nccl_poll(tp, comm_of(tp), what, false);
  else
    nccl_check(r, what);
}

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
  if (tp.blocking_init) {  // the pre-fix path, kept to reproduce issue 25 (TpGpuDiag)
    ncclComm_t comm = nullptr;
    NCCL_CHECK(ncclCommInitRank(&comm, tp.n_ranks, id, tp.rank));
    tp.comm = comm;
    return;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // set-up runs in NCCL's own thread; we poll it under the deadline
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, tp.n_ranks, id, tp.rank, &config);
  try {
    if (r != ncclInProgress) nccl_check(r, "ncclCommInitRankConfig");
    nccl_poll(tp, comm, "communicator set-up (ncclCommInitRankConfig)", true);
  } catch (...) {
    bounded_abort(comm, tp.timeout_s, who(tp));
    throw;
  }
  tp.comm = comm;
}

void tp_destroy_comm(TpRank& tp, bool abort) {
  if (abort && tp.custom) tp.custom->abort();
  if (!tp.comm) return;
  ncclComm_t comm = comm_of(tp);
  tp.comm = nullptr;
  if (!abort) {
    try {  // finalize flushes outstanding work (non-blocking: poll it), then destroy frees
      const ncclResult_t r = ncclCommFinalize(comm);
      if (r == ncclInProgress)
        nccl_poll(tp, comm, "ncclCommFinalize", true);
      else
        nccl_check(r, "ncclCommFinalize");
      NCCL_CHECK(ncclCommDestroy(comm));
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "servelab: %s; aborting the communicator\n", e.what());
    }
  }
  bounded_abort(comm, tp.timeout_s, who(tp));
}

void tp_wait_stream(const TpRank& tp, cudaStream_t stream, const char* what) {
  const Clock::time_point deadline = deadline_of(tp);
  for (unsigned i = 0;; ++i) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (tp.custom && tp.custom->error(tp.rank))  // our kernel gave up on a peer: it says which
      throw TpTimeout(std::string(what) + ": " + tp.custom->error_message(tp.rank));
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) CUDA_CHECK(e);
    if (tp.peer_failed && tp.peer_failed->load(std::memory_order_relaxed))
      throw TpPeerFailed(std::string(what) + " on " + who(tp) + " given up: another rank failed");
    if ((i & 255) == 255) {
      if (tp.comm) {  // an NCCL error raised in the background (a broken connection) ends the wait too
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(comm_of(tp), &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
          nccl_check(state, what);
      }
      if (Clock::now() > deadline)
        throw TpTimeout(std::string(what) + " on " + who(tp) + " did not finish within " + seconds_str(tp.timeout_s) +
                        " s: a collective is stuck (a peer rank failed or never launched it)");
    }
    std::this_thread::yield();
  }
}

void tp_all_reduce(TpRank& tp, void* x, int64_t n, cudaStream_t stream) {
  if (tp_uses_custom(tp, x, n)) {
    tp.custom->run(tp.rank, x, x, n, stream,
                   tp_lamport_ok(tp, stream) ? kernels::CustomAllReduce::Variant::automatic
                                             : kernels::CustomAllReduce::Variant::push);
    return;
  }
  if (tp.custom_only)
    throw std::invalid_argument("all_reduce: custom cannot take a message of " + std::to_string(n * 2) +
                                " bytes (its buffer holds " + std::to_string(tp.custom_max_bytes) +
                                " bytes of bf16, a multiple of 16 bytes, 16-byte aligned); raise "
                                "all_reduce_max_bytes or use all_reduce: auto");
  const ncclDataType_t type = tp.dtype == DType::f16 ? ncclFloat16 : ncclBfloat16;
  nccl_call(tp, ncclAllReduce(x, x, size_t(n), type, ncclSum, comm_of(tp), stream), "ncclAllReduce");
}

void tp_lm_head(TpRank& tp, kernels::Gemm& gemm, const void* xs, const void* lm_head_rows, float* logits, int n,
                int d, cudaStream_t stream) {
  if (n > tp.gather_rows) throw std::logic_error("tp_lm_head: the gather buffer was not grown for the step");
  const size_t block = size_t(n) * tp.local_vocab;  // one rank's [n, V/N]
  float* all = tp.gather.get<float>();
  const auto type = tp.dtype == DType::f16 ? kernels::ScalarType::f16 : kernels::ScalarType::bf16;
  gemm.run(type, xs, lm_head_rows, all + tp.rank * block, n, tp.local_vocab, d, true, stream);
  nccl_call(tp, ncclAllGather(all + tp.rank * block, all, block, ncclFloat32, comm_of(tp), stream), "ncclAllGather");
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
void tp_destroy_comm(TpRank& tp, bool abort) {
  if (abort && tp.custom) tp.custom->abort();
  tp.comm = nullptr;
}
void tp_wait_stream(const TpRank&, cudaStream_t stream, const char*) { CUDA_CHECK(cudaStreamSynchronize(stream)); }
void tp_all_reduce(TpRank&, void*, int64_t, cudaStream_t) { no_nccl(); }
void tp_lm_head(TpRank&, kernels::Gemm&, const void*, const void*, float*, int, int, cudaStream_t) { no_nccl(); }

#endif

bool tp_all_reduce_add_rms_norm(TpRank& tp, void* delta, void* h, const void* w, void* xn, int rows, int d, float eps,
                                cudaStream_t stream) {
  const int64_t n = int64_t(rows) * d;
  const bool pushed = tp.pushed != nullptr;
  if (pushed && tp.pushed != delta)
    throw std::logic_error("tp_all_reduce_add_rms_norm: a product pushed another buffer than this delta");
  tp.pushed = nullptr;
  if (!tp.fuse_add_norm || !tp_uses_custom(tp, delta, n) || !tp.custom->fuses_add_rms_norm(rows, d) ||
      !tp_lamport_ok(tp, stream) ||
      ((reinterpret_cast<uintptr_t>(h) | reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(xn)) & 15)) {
    // the product's rows are in the peers' buffers already: a plain all-reduce would push them again
    if (pushed) throw std::logic_error("tp_all_reduce_add_rms_norm: the product pushed, but the fused kernel cannot run");
    return false;
  }
  tp.custom->run_add_rms_norm(tp.rank, delta, h, w, xn, rows, d, eps, stream, pushed);
  return true;
}

bool tp_product_push(TpRank& tp, kernels::Gemm& gemm, const void* x, const void* w, void* y, int rows, int out, int in,
                     cudaStream_t stream) {
  const int64_t n = int64_t(rows) * out;
  if (!tp.push_from_product || !tp.fuse_add_norm || !tp_uses_custom(tp, y, n) ||
      !tp.custom->fuses_add_rms_norm(rows, out) || !tp_lamport_ok(tp, stream))
    return false;
  const kernels::LamportPush push = tp.custom->lamport_push(tp.rank);
  if (!push.active() || !gemm.run_pushed(kernels::ScalarType::bf16, x, w, y, rows, out, in, push, stream)) return false;
  tp.pushed = y;
  return true;
}

bool tp_uses_custom(const TpRank& tp, const void* x, int64_t n) {
  return tp.custom && tp.dtype == DType::bf16 && n % 8 == 0 && n * 2 <= tp.custom_max_bytes &&
         (reinterpret_cast<uintptr_t>(x) & 15) == 0;
}

bool tp_lamport_ok(const TpRank& tp, cudaStream_t stream) {
  if (tp.lamport_eager) return true;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status == cudaStreamCaptureStatusActive;
}

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
