#include "kernels/custom_allreduce.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/norm_row.cuh"

namespace servelab::kernels {

namespace {

struct Peers {
  void* staging[CustomAllReduce::kMaxRanks];
  uint32_t* flags[CustomAllReduce::kMaxRanks];
};

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
/// 16 bytes, bypassing L1 (the line may hold an older call's data of the same staging half).
__device__ __forceinline__ uint4 load_cg(const void* p) { return __ldcg(static_cast<const uint4*>(p)); }

__device__ __forceinline__ void add8(float (&acc)[8], uint4 v) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] += f.x;
    acc[2 * i + 1] += f.y;
  }
}
/// This block's call number: its counter, incremented once a call (every block of every kernel
/// sharing the counters runs every call, so all blocks, and the ranks, agree on it).
__device__ __forceinline__ uint32_t next_call(uint32_t* counters) {
  __shared__ uint32_t s_cnt;
  if (threadIdx.x == 0) {
    s_cnt = counters[blockIdx.x] + 1;
    counters[blockIdx.x] = s_cnt;
  }
  __syncthreads();
  return s_cnt;
}

/// Block b of every rank meets here: thread t < n tells rank t that this rank's block b reached
/// call `cnt` (its stores before this barrier made visible system-wide first), then waits until
/// rank t's block b said the same. Gives up after timeout_ns, or when the host raised the abort
/// word (status[0]), recording 1 + t (or kAborted) in status[1 + rank]. Returns false (to every
/// thread of the block) when it gave up: the caller skips the reduction rather than hang or trap.
__device__ __forceinline__ bool barrier(const Peers& p, uint32_t* my_flags, volatile uint32_t* status, int rank,
                                        int n, uint32_t cnt, uint64_t timeout_ns) {
  __shared__ int s_failed;
  if (threadIdx.x == 0) s_failed = 0;
  __syncthreads();
  const int t = threadIdx.x;
  if (t < n) {
    __threadfence_system();
    store_release_sys(p.flags[t] + blockIdx.x * n + rank, cnt);
    const uint32_t* mine = my_flags + blockIdx.x * n + t;
    uint64_t t0 = 0;
    for (uint32_t spins = 0; int32_t(load_acquire_sys(mine) - cnt) < 0; ++spins) {
      if ((spins & 255) != 255) continue;  // the clock and the host's word only now and then
      const uint64_t now = global_ns();
      if (t0 == 0) t0 = now;
      const bool aborted = status[0] != 0;
      if (aborted || now - t0 > timeout_ns) {
        status[1 + rank] = aborted ? CustomAllReduce::kAborted : uint32_t(1 + t);
        __threadfence_system();
        atomicExch(&s_failed, 1);
        break;
      }
    }
  }
  __syncthreads();
  return s_failed == 0;
}

template <bool kPush>
__global__ void __launch_bounds__(512) one_shot(Peers p, uint32_t* my_flags, uint32_t* counters,
                                                volatile uint32_t* status, const uint4* in, uint4* out, int64_t n_vec,
                                                int64_t slot_vec, int rank, int n, uint64_t timeout_ns) {
  pdl_wait();  // launched with PDL, as lamport
  pdl_launch_dependents();
  const uint32_t cnt = next_call(counters);
  const int64_t half = int64_t(cnt & 1) * n * slot_vec;  // this call's half of every staging buffer
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (kPush) {
    for (int64_t v = first; v < n_vec; v += stride) {
      const uint4 x = in[v];
      for (int r = 0; r < n; ++r) static_cast<uint4*>(p.staging[r])[half + rank * slot_vec + v] = x;
    }
  } else {
    uint4* mine = static_cast<uint4*>(p.staging[rank]) + half;
    for (int64_t v = first; v < n_vec; v += stride) mine[v] = in[v];
  }
  if (!barrier(p, my_flags, status, rank, n, cnt, timeout_ns)) return;  // a peer never came: status says so
  for (int64_t v = first; v < n_vec; v += stride) {
    float acc[8];
    if (kPush) {
      const uint4* mine = static_cast<const uint4*>(p.staging[rank]) + half;
      unpack8<__nv_bfloat16>(load_cg(mine + v), acc);
      for (int r = 1; r < n; ++r) add8(acc, load_cg(mine + r * slot_vec + v));
    } else {
      unpack8<__nv_bfloat16>(load_cg(static_cast<const uint4*>(p.staging[0]) + half + v), acc);
      for (int r = 1; r < n; ++r) add8(acc, load_cg(static_cast<const uint4*>(p.staging[r]) + half + v));
    }
    out[v] = pack8<__nv_bfloat16>(acc);
  }
}

constexpr uint32_t kNegZero2 = 0x80008000u;  // two bf16 -0.0: a word no peer has written yet

/// The four 32-bit words of v with every -0.0 half made +0.0 (what a peer may send).
__device__ __forceinline__ uint4 positive_zeros(uint4 v) {
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if ((w[i] & 0xffffu) == 0x8000u) w[i] &= 0xffff0000u;
    if ((w[i] >> 16) == 0x8000u) w[i] &= 0x0000ffffu;
  }
  return v;
}
/// True while some bf16 of v is still -0.0 (its peer's store has not landed, or only part of it).
__device__ __forceinline__ bool unwritten(uint4 v) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  bool any = false;
#pragma unroll
  for (int i = 0; i < 4; ++i) any |= (w[i] & 0xffffu) == 0x8000u || (w[i] >> 16) == 0x8000u;
  return any;
}
__device__ __forceinline__ uint4 load_volatile(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// Polls one slot word (16 bytes) of this rank's lamport buffer until no bf16 of it is -0.0, sets it
/// back to -0.0, returns it; on a timeout, an abort or a sibling thread's failure (status) it
/// records the failure once and returns zeros with `failed` set (the caller's block carries on to
/// its barrier-free end rather than leave threads behind at a __syncthreads()).
__device__ __forceinline__ uint4 lamport_take(uint4* slot, volatile uint32_t* status, int rank, int r,
                                              uint64_t timeout_ns, bool& failed) {
  uint4 y = make_uint4(0, 0, 0, 0);
  if (failed) return y;
  uint64_t t0 = 0;
  for (uint32_t spins = 0; unwritten(y = load_volatile(slot)); ++spins) {
    if ((spins & 255) != 255) continue;
    const uint64_t now = global_ns();
    if (t0 == 0) t0 = now;
    const bool aborted = status[0] != 0;
    if (aborted || status[1 + rank] != 0 || now - t0 > timeout_ns) {
      if (status[1 + rank] == 0) status[1 + rank] = aborted ? CustomAllReduce::kAborted : uint32_t(1 + r);
      __threadfence_system();
      failed = true;
      return make_uint4(0, 0, 0, 0);
    }
  }
  *slot = make_uint4(kNegZero2, kNegZero2, kNegZero2, kNegZero2);
  return y;
}

struct LamportPeers {
  uint4* buf[CustomAllReduce::kMaxRanks];
};

/// One-shot all-reduce with no barrier: rank `rank` stores its input (negative zeros made positive)
/// into slot `rank` of every peer's receive buffer `cnt % 3`, then sums its own input with each
/// peer's slot of its own buffer as the words land (lamport_take), in rank order. Gives up like
/// barrier() does: after timeout_ns or on abort.
__global__ void __launch_bounds__(512) lamport(LamportPeers p, uint32_t* counters, volatile uint32_t* status,
                                               const uint4* in, uint4* out, int64_t n_vec, int64_t slot_vec,
                                               int rank, int n, uint64_t timeout_ns) {
  // Launched with PDL (launch_pdl): resident while the product before it runs, it starts the
  // moment that product's output is complete; the norm after it may be scheduled at once.
  pdl_wait();
  pdl_launch_dependents();
  const int64_t buf = int64_t(next_call(counters) % 3) * n * slot_vec;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = first; v < n_vec; v += stride) {
    const uint4 x = positive_zeros(in[v]);
    for (int r = 0; r < n; ++r)
      if (r != rank) p.buf[r][buf + rank * slot_vec + v] = x;
  }
  uint4* mine = p.buf[rank] + buf;
  bool failed = false;  // then the output is undefined and the object unusable (as after a barrier failure)
  for (int64_t v = first; v < n_vec; v += stride) {
    float acc[8];
    for (int r = 0; r < n; ++r) {
      const uint4 y = r == rank ? positive_zeros(in[v])
                                : lamport_take(mine + r * slot_vec + v, status, rank, r, timeout_ns, failed);
      if (r == 0) unpack8<__nv_bfloat16>(y, acc);
      else add8(acc, y);
    }
    out[v] = pack8<__nv_bfloat16>(acc);
  }
}

/// lamport fused with the residual add and RMSNorm that follow a row-parallel product: for each of
/// the block's rows, s = the all-reduced delta (rounded to bf16, as lamport writes it), residual +=
/// s (rounded, stored), out = rms_norm(residual) · weight, through norm_row_from_registers: the bits
/// of lamport then add_rms_norm. The grid is the lamport kernel's (blocks_ blocks: the per-block
/// call counters stay in step), kNormThreads threads, row b, b + gridDim.x, ... per block.
__global__ void __launch_bounds__(kNormThreads) lamport_add_rms_norm(
    LamportPeers p, uint32_t* counters, volatile uint32_t* status, const uint4* delta, uint4* residual,
    const uint4* weight, uint4* out, int rows, int d, float eps, int64_t slot_vec, int rank, int n,
    uint64_t timeout_ns, bool pushed) {
  const int nv = d / 8;
  Vec8 wv[kNormCache];
#pragma unroll
  for (int i = 0; i < kNormCache; ++i) {
    const int v = threadIdx.x + i * kNormThreads;
    if (v < nv) wv[i] = weight[v];
  }
  pdl_wait();
  pdl_launch_dependents();
  const int64_t buf = int64_t(next_call(counters) % 3) * n * slot_vec;
  for (int row = blockIdx.x; row < rows && !pushed; row += gridDim.x)  // pushed: the product did it
    for (int v = threadIdx.x; v < nv; v += kNormThreads) {
      const int64_t e = int64_t(row) * nv + v;
      const uint4 x = positive_zeros(delta[e]);
      for (int r = 0; r < n; ++r)
        if (r != rank) p.buf[r][buf + rank * slot_vec + e] = x;
    }
  uint4* mine = p.buf[rank] + buf;
  bool failed = false;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    float f[kNormCache][8];
#pragma unroll
    for (int i = 0; i < kNormCache; ++i) {
      const int v = threadIdx.x + i * kNormThreads;
      if (v >= nv) continue;
      const int64_t e = int64_t(row) * nv + v;
      float acc[8], t[8];
      for (int r = 0; r < n; ++r) {
        const uint4 y = r == rank ? positive_zeros(delta[e])
                                  : lamport_take(mine + r * slot_vec + e, status, rank, r, timeout_ns, failed);
        if (r == 0) unpack8<__nv_bfloat16>(y, acc);
        else add8(acc, y);
      }
      unpack8<__nv_bfloat16>(pack8<__nv_bfloat16>(acc), f[i]);  // the all-reduce's output, as stored
      unpack8<__nv_bfloat16>(residual[e], t);
#pragma unroll
      for (int j = 0; j < 8; ++j) f[i][j] += t[j];
      const uint4 packed = pack8<__nv_bfloat16>(f[i]);
      residual[e] = packed;
      unpack8<__nv_bfloat16>(packed, f[i]);  // the norm sees the stored (rounded) residual
    }
    norm_row_from_registers<__nv_bfloat16>(f, wv, nv, d, eps,
                                           reinterpret_cast<__nv_bfloat16*>(out + int64_t(row) * nv));
    __syncthreads();  // norm_block_sum's scratch is reused by the next row
  }
}

__global__ void fill_u32(uint32_t* p, int64_t n, uint32_t value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = value;
}

/// Loads every kernel of this file on the current device now. Under CUDA's lazy loading (the
/// default) a kernel's first launch on a device loads its code there, and that load can wait for
/// the kernels running on the peer devices to finish; a rank whose kernel spins for its peer's
/// data then waits for a peer that waits for it, until the spin times out (seen on 2 x H200: the
/// fused kernel's first call timed out after 10 s and left stale words in the receive buffer).
void load_kernels_here() {
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, one_shot<true>));
  CUDA_CHECK(cudaFuncGetAttributes(&attr, one_shot<false>));
  CUDA_CHECK(cudaFuncGetAttributes(&attr, lamport));
  CUDA_CHECK(cudaFuncGetAttributes(&attr, lamport_add_rms_norm));
  CUDA_CHECK(cudaFuncGetAttributes(&attr, fill_u32));
}

}  // namespace

CustomAllReduce::CustomAllReduce(const std::vector<int>& devices, int64_t max_bytes, int blocks, int threads,
                                 int64_t lamport_max_bytes)
    : n_(int(devices.size())), blocks_(blocks), threads_(threads), max_bytes_((max_bytes + 15) / 16 * 16),
      lamport_max_bytes_(std::min(max_bytes_, (std::max<int64_t>(lamport_max_bytes, 0) + 15) / 16 * 16)),
      devices_(devices) {
  if (n_ < 1 || n_ > kMaxRanks) throw std::invalid_argument("CustomAllReduce: 1..8 ranks");
  if (threads_ < n_ || threads_ > 512 || blocks_ < 1) throw std::invalid_argument("CustomAllReduce: bad launch shape");
  int prev = 0;
  CUDA_CHECK(cudaGetDevice(&prev));
  staging_.assign(n_, nullptr);
  flags_.assign(n_, nullptr);
  counters_.assign(n_, nullptr);
  lamport_.assign(n_, nullptr);
  lamport_counters_.assign(n_, nullptr);
  for (int r = 0; r < n_; ++r) {
    CUDA_CHECK(cudaSetDevice(devices_[r]));
    for (int q = 0; q < n_; ++q) {
      if (q == r) continue;
      int can = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, devices_[r], devices_[q]));
      if (!can)
        throw std::runtime_error("CustomAllReduce: device " + std::to_string(devices_[r]) + " cannot access device " +
                                 std::to_string(devices_[q]) + "'s memory (no P2P)");
      const cudaError_t e = cudaDeviceEnablePeerAccess(devices_[q], 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        CUDA_CHECK(e);
    }
    load_kernels_here();
    CUDA_CHECK(cudaMalloc(&staging_[r], size_t(2) * n_ * max_bytes_));
    CUDA_CHECK(cudaMalloc(&flags_[r], size_t(blocks_) * n_ * sizeof(uint32_t)));
    CUDA_CHECK(cudaMemset(flags_[r], 0, size_t(blocks_) * n_ * sizeof(uint32_t)));
    CUDA_CHECK(cudaMalloc(&counters_[r], size_t(blocks_) * sizeof(uint32_t)));
    CUDA_CHECK(cudaMemset(counters_[r], 0, size_t(blocks_) * sizeof(uint32_t)));
    if (lamport_max_bytes_ > 0) {
      const int64_t words = 3 * int64_t(n_) * lamport_max_bytes_ / 4;
      CUDA_CHECK(cudaMalloc(&lamport_[r], size_t(words) * 4));
      fill_u32<<<256, 256>>>(static_cast<uint32_t*>(lamport_[r]), words, kNegZero2);
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaMalloc(&lamport_counters_[r], size_t(blocks_) * sizeof(uint32_t)));
      CUDA_CHECK(cudaMemset(lamport_counters_[r], 0, size_t(blocks_) * sizeof(uint32_t)));
    }
  }
  // Portable and mapped: every device reads and writes it at the same (unified) address.
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&status_), size_t(1 + kMaxRanks) * sizeof(uint32_t),
                           cudaHostAllocMapped | cudaHostAllocPortable));
  for (int i = 0; i <= kMaxRanks; ++i) status_[i] = 0;
  for (int r = 0; r < n_; ++r) {
    CUDA_CHECK(cudaSetDevice(devices_[r]));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  CUDA_CHECK(cudaSetDevice(prev));
}

CustomAllReduce::~CustomAllReduce() {
  int prev = 0;
  cudaGetDevice(&prev);
  for (int r = 0; r < n_; ++r) {
    cudaSetDevice(devices_[r]);
    if (staging_[r]) cudaFree(staging_[r]);
    if (flags_[r]) cudaFree(flags_[r]);
    if (counters_[r]) cudaFree(counters_[r]);
    if (lamport_[r]) cudaFree(lamport_[r]);
    if (lamport_counters_[r]) cudaFree(lamport_counters_[r]);
  }
  if (status_) cudaFreeHost(status_);
  cudaSetDevice(prev);
}

void CustomAllReduce::abort() {
  reinterpret_cast<volatile uint32_t*>(status_)[0] = 1;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

uint32_t CustomAllReduce::error(int rank) const {
  if (rank < 0 || rank >= n_) throw std::invalid_argument("CustomAllReduce::error: bad rank");
  return reinterpret_cast<const volatile uint32_t*>(status_)[1 + rank];
}

std::string CustomAllReduce::error_message(int rank) const {
  const uint32_t e = error(rank);
  const std::string me = "custom all-reduce on rank " + std::to_string(rank) + " of " + std::to_string(n_);
  if (e == 0) return me + ": no error";
  if (e == kAborted) return me + ": given up (aborted: another rank failed)";
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", double(spin_timeout_ns_) * 1e-9);
  return me + ": rank " + std::to_string(e - 1) + " did not arrive within " + secs +
         " s (a peer that failed or never launched its half); output undefined";
}

void CustomAllReduce::run(int rank, const void* in, void* out, int64_t n, cudaStream_t stream, Variant v) const {
  if (rank < 0 || rank >= n_) throw std::invalid_argument("CustomAllReduce::run: bad rank");
  if (n % 8 || n * 2 > max_bytes_)
    throw std::invalid_argument("CustomAllReduce::run: n must be a multiple of 8 and fit max_bytes (n = " +
                                std::to_string(n) + ")");
  if ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15)
    throw std::invalid_argument("CustomAllReduce::run: pointers must be 16-byte aligned");
  if (v == Variant::automatic) v = n * 2 <= lamport_max_bytes_ ? Variant::lamport : Variant::push;
  if (v == Variant::lamport) {
    if (n * 2 > lamport_max_bytes_)
      throw std::invalid_argument("CustomAllReduce::run: lamport takes at most " + std::to_string(lamport_max_bytes_) +
                                  " bytes (n = " + std::to_string(n) + ")");
    LamportPeers lp{};
    for (int r = 0; r < n_; ++r) lp.buf[r] = static_cast<uint4*>(lamport_[r]);
    launch_pdl(lamport, blocks_, threads_, 0, stream, lp, lamport_counters_[rank], status_, static_cast<const uint4*>(in),
               static_cast<uint4*>(out), int64_t(n / 8), int64_t(lamport_max_bytes_ / 16), rank, n_, spin_timeout_ns_);
    return;
  }
  Peers p{};
  for (int r = 0; r < n_; ++r) {
    p.staging[r] = staging_[r];
    p.flags[r] = flags_[r];
  }
  const int64_t n_vec = n / 8, slot_vec = max_bytes_ / 16;
  launch_pdl(v == Variant::push ? one_shot<true> : one_shot<false>, blocks_, threads_, 0, stream, p, flags_[rank],
             counters_[rank], status_, static_cast<const uint4*>(in), static_cast<uint4*>(out), n_vec, slot_vec, rank,
             n_, spin_timeout_ns_);
}

bool CustomAllReduce::fuses_add_rms_norm(int64_t rows, int d) const {
  return d > 0 && d % 8 == 0 && d / 8 <= kNormThreads * kNormCache && rows >= 0 &&
         rows * d * 2 <= lamport_max_bytes_;
}

void CustomAllReduce::run_add_rms_norm(int rank, const void* delta, void* residual, const void* weight, void* out,
                                       int rows, int d, float eps, cudaStream_t stream, bool pushed) const {
  if (rank < 0 || rank >= n_) throw std::invalid_argument("CustomAllReduce::run_add_rms_norm: bad rank");
  if (!fuses_add_rms_norm(rows, d))
    throw std::invalid_argument("CustomAllReduce::run_add_rms_norm: " + std::to_string(rows) + " rows of " +
                                std::to_string(d) + " do not fit (d % 8 == 0, d <= 8192, rows * d * 2 <= " +
                                std::to_string(lamport_max_bytes_) + ")");
  if ((reinterpret_cast<uintptr_t>(delta) | reinterpret_cast<uintptr_t>(residual) | reinterpret_cast<uintptr_t>(weight) |
       reinterpret_cast<uintptr_t>(out)) & 15)
    throw std::invalid_argument("CustomAllReduce::run_add_rms_norm: pointers must be 16-byte aligned");
  LamportPeers lp{};
  for (int r = 0; r < n_; ++r) lp.buf[r] = static_cast<uint4*>(lamport_[r]);
  launch_pdl(lamport_add_rms_norm, blocks_, kNormThreads, 0, stream, lp, lamport_counters_[rank], status_,
             static_cast<const uint4*>(delta), static_cast<uint4*>(residual), static_cast<const uint4*>(weight),
             static_cast<uint4*>(out), rows, d, eps, int64_t(lamport_max_bytes_ / 16), rank, n_, spin_timeout_ns_, pushed);
}

LamportPush CustomAllReduce::lamport_push(int rank) const {
  if (rank < 0 || rank >= n_) throw std::invalid_argument("CustomAllReduce::lamport_push: bad rank");
  LamportPush p;
  if (lamport_max_bytes_ == 0) return p;  // n == 0: no push
  for (int r = 0; r < n_; ++r) p.buf[r] = lamport_[r];
  p.counter = lamport_counters_[rank];
  p.slot_elems = lamport_max_bytes_ / 2;
  p.rank = rank;
  p.n = n_;
  return p;
}

}  // namespace servelab::kernels
