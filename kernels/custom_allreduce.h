#pragma once
// Our own all-reduce (sum) of bf16 over the GPUs of ONE process (issue 25): one-shot over CUDA
// peer memory (cudaDeviceEnablePeerAccess, no IPC), for the small messages of a decode step, where
// NCCL's latency dominates. Two variants: `push` (each rank stores its input into a slot of every
// rank's staging buffer over NVLink, then every rank sums its slots locally) and `pull` (each rank
// copies its input into its own staging buffer, then reads every peer's). Both sum in float in rank
// order 0..n-1 and round once, so every rank gets the same bits, equal to
// kernels/ref/allreduce_ref.h (and, with 2 ranks, to NCCL's bf16 sum). One kernel per rank and
// call, no host synchronisation: capturable in CUDA graphs. The ranks' kernels meet at a barrier of
// per-block flags; a rank whose peer never arrives traps after `spin_timeout_ns` (an error, not a
// hang). Staging is double-buffered by call parity, so back-to-back calls need no closing barrier.
// Every rank must make the same sequence of calls (same sizes) on its own device and stream.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace servelab::kernels {

class CustomAllReduce {
 public:
  enum class Variant { push, pull };
  static constexpr int kMaxRanks = 8;
  /// Allocates each rank's staging buffers and flags on devices[r] and enables peer access between
  /// every pair (throws std::runtime_error when a pair cannot). max_bytes: the largest message.
  CustomAllReduce(const std::vector<int>& devices, int64_t max_bytes, int blocks = 32, int threads = 512);
  ~CustomAllReduce();
  CustomAllReduce(const CustomAllReduce&) = delete;
  CustomAllReduce& operator=(const CustomAllReduce&) = delete;

  int n_ranks() const { return n_; }
  int64_t max_bytes() const { return max_bytes_; }
  /// Enqueues rank r's part of out = sum over ranks of in (n bf16 values; n % 8 == 0, 16-byte
  /// aligned pointers; in == out allowed) on `stream` (of devices[r]; the caller's current device
  /// must be devices[r]). Every rank must call it with the same n.
  void run(int rank, const void* in, void* out, int64_t n, cudaStream_t stream, Variant v = Variant::push) const;
  /// Nanoseconds a block waits at the barrier before it traps (default 10 s).
  void set_spin_timeout_ns(uint64_t ns) { spin_timeout_ns_ = ns; }

 private:
  int n_ = 0, blocks_ = 0, threads_ = 0;
  int64_t max_bytes_ = 0;
  uint64_t spin_timeout_ns_ = 10'000'000'000ull;
  std::vector<int> devices_;
  std::vector<void*> staging_;   ///< per rank: [2 halves][n_ slots][max_bytes]
  std::vector<uint32_t*> flags_;    ///< per rank: [blocks][n_] arrival counters written by the peers
  std::vector<uint32_t*> counters_; ///< per rank: [blocks] calls made by that block
};

}  // namespace servelab::kernels
