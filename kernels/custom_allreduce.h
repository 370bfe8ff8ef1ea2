#pragma once
// Our own all-reduce (sum) of bf16 over the GPUs of ONE process (issue 25): one-shot over CUDA
// peer memory (cudaDeviceEnablePeerAccess, no IPC), for the small messages of a decode step, where
// NCCL's latency dominates. Two variants: `push` (each rank stores its input into a slot of every
// rank's staging buffer over NVLink, then every rank sums its slots locally) and `pull` (each rank
// copies its input into its own staging buffer, then reads every peer's). Both sum in float in rank
// order 0..n-1 and round once, so every rank gets the same bits, equal to
// kernels/ref/allreduce_ref.h (and, with 2 ranks, to NCCL's bf16 sum). One kernel per rank and
// call, no host synchronisation: capturable in CUDA graphs (every address is fixed at
// construction). The ranks' kernels meet at a barrier of per-block flags. A rank whose peer never
// arrives does not hang and does not trap (which would kill the CUDA context): after
// `spin_timeout_ns`, or as soon as the host calls abort(), the waiting block records the failure in
// a pinned, device-mapped status word (error(rank) reads it without touching the stream) and the
// kernel ends, its output undefined. After a failure the ranks' call counters disagree: the object
// is unusable (its owner, the tensor-parallel backend, is marked broken too).
// Staging is double-buffered by call parity, so back-to-back calls need no closing barrier.
// A third variant, `lamport` (the default up to lamport_max_bytes), has no barrier at all: each rank
// stores its input into its slot of every peer's receive buffer, whose 16-bit words were all set to
// -0.0 (0x8000), and every rank polls its own buffer until no word of a slot is -0.0 any more, so
// the data is its own arrival flag and a message costs one one-way trip over NVLink (no fence, no
// flag round trip). Inputs' -0.0 words are sent as +0.0 (so a sum of negative zeros comes out
// +0.0; kernels/ref/allreduce_ref.h's negative_zero_as_positive). After reading a slot a rank sets
// it back to -0.0; three buffers in turn keep a peer that is one call ahead off the one being read.
// Every rank must make the same sequence of calls (same sizes) on its own device and stream.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/lamport_push.h"

namespace servelab::kernels {

class CustomAllReduce {
 public:
  enum class Variant { automatic, push, pull, lamport };  ///< automatic: lamport up to lamport_max_bytes, else push
  static constexpr int64_t kDefaultLamportMaxBytes = int64_t(1) << 20;
  static constexpr int kDefaultBlocks = 32, kDefaultThreads = 512;
  static constexpr int kMaxRanks = 8;
  /// Allocates each rank's staging buffers and flags on devices[r] and enables peer access between
  /// every pair (throws std::runtime_error when a pair cannot). max_bytes: the largest message.
  /// lamport_max_bytes (capped at max_bytes): the largest message of the lamport variant.
  CustomAllReduce(const std::vector<int>& devices, int64_t max_bytes, int blocks = kDefaultBlocks,
                  int threads = kDefaultThreads, int64_t lamport_max_bytes = kDefaultLamportMaxBytes);
  ~CustomAllReduce();
  CustomAllReduce(const CustomAllReduce&) = delete;
  CustomAllReduce& operator=(const CustomAllReduce&) = delete;

  int n_ranks() const { return n_; }
  int64_t max_bytes() const { return max_bytes_; }
  /// Enqueues rank r's part of out = sum over ranks of in (n bf16 values; n % 8 == 0, 16-byte
  /// aligned pointers; in == out allowed) on `stream` (of devices[r]; the caller's current device
  /// must be devices[r]). Every rank must call it with the same n.
  void run(int rank, const void* in, void* out, int64_t n, cudaStream_t stream, Variant v = Variant::automatic) const;
  int64_t lamport_max_bytes() const { return lamport_max_bytes_; }
  /// The lamport all-reduce of delta[rows, d] fused with what follows a row-parallel product:
  /// residual += sum (bf16, stored), out = rms_norm(residual) · weight (eps): the same bits as
  /// run(lamport) then kernels::add_rms_norm, one kernel instead of two. bf16; needs
  /// fuses_add_rms_norm(rows, d). Shares lamport's buffers and call counters: a call of either
  /// counts for both, and every rank makes the same sequence of them.
  /// pushed: the product that wrote delta already stored it into the peers' buffers
  /// (lamport_push(rank) given to run_gemv), so this kernel only waits for theirs.
  void run_add_rms_norm(int rank, const void* delta, void* residual, const void* weight, void* out, int rows, int d,
                        float eps, cudaStream_t stream, bool pushed = false) const;
  /// Where rank's product stores its rows for a pushed run_add_rms_norm (lamport_push.h).
  LamportPush lamport_push(int rank) const;
  /// d % 8 == 0, d <= 8192 (a row in registers) and rows · d · 2 <= lamport_max_bytes().
  bool fuses_add_rms_norm(int64_t rows, int d) const;
  /// Nanoseconds a block waits at the barrier for a peer before it gives up (default 10 s). Read
  /// at launch: a graph keeps the value it was captured with.
  void set_spin_timeout_ns(uint64_t ns) { spin_timeout_ns_ = ns; }
  /// Tells every kernel still waiting at a barrier (and every later one) to give up at once, marked
  /// failed (host write to the mapped status word; safe from any thread, any time).
  void abort();
  /// 0 while rank r's calls have all met their peers; otherwise 1 + the rank it waited for in vain
  /// (kAborted when abort() ended the wait). Reads pinned host memory: no stream synchronisation.
  uint32_t error(int rank) const;
  static constexpr uint32_t kAborted = 0xffffffffu;
  /// "custom all-reduce on rank 0: rank 1 did not arrive within 5 s" for error(rank) != 0.
  std::string error_message(int rank) const;

 private:
  int n_ = 0, blocks_ = 0, threads_ = 0;
  int64_t max_bytes_ = 0, lamport_max_bytes_ = 0;
  uint64_t spin_timeout_ns_ = 10'000'000'000ull;
  std::vector<int> devices_;
  std::vector<void*> staging_;   ///< per rank: [2 halves][n_ slots][max_bytes]
  std::vector<uint32_t*> flags_;    ///< per rank: [blocks][n_] arrival counters written by the peers
  std::vector<uint32_t*> counters_; ///< per rank: [blocks] calls made by that block
  std::vector<void*> lamport_;      ///< per rank: [3 buffers][n_ slots][lamport_max_bytes], idle words -0.0
  std::vector<uint32_t*> lamport_counters_;  ///< per rank: [blocks] lamport calls made by that block
  /// Pinned, device-mapped: [0] the abort word (host writes), [1 + r] rank r's error (its kernels write).
  uint32_t* status_ = nullptr;
};

}  // namespace servelab::kernels
