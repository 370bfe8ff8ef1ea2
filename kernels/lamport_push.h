#pragma once
// Where a row-parallel product stores its rows for the lamport all-reduce that follows it
// (kernels/custom_allreduce.h): the product's kernel (gemv.cu) writes each output value, its -0.0
// sent as +0.0, straight into this rank's slot of every peer's current lamport receive buffer, so
// the all-reduce's own push (a kernel launched after the product's last block, then a trip over
// NVLink) overlaps the product instead (CustomAllReduce::run_add_rms_norm with `pushed`). The
// current buffer is the one the next lamport call on this rank will read: (calls so far + 1) % 3,
// the calls counted on the device (block 0's counter), so CUDA graph replays stay in step.
#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

namespace servelab::kernels {

struct LamportPush {
  static constexpr int kMaxRanks = 8;
  void* buf[kMaxRanks] = {};          ///< each rank's lamport buffers: [3][n][slot_elems] bf16
  const uint32_t* counter = nullptr;  ///< this rank's lamport calls so far (block 0's counter)
  int64_t slot_elems = 0;             ///< bf16 values a slot holds (lamport_max_bytes / 2)
  int rank = 0, n = 0;                ///< n == 0: no push
#if defined(__CUDACC__)
  __host__ __device__
#endif
  bool active() const { return n > 0; }
};

#if defined(__CUDACC__)
/// Stores value e of this rank's message (bits v, bf16) into its slot of every peer's buffer.
/// Call after the kernel's PDL wait (the counter is the previous lamport call's).
__device__ __forceinline__ void lamport_push_value(const LamportPush& p, int64_t e, __nv_bfloat16 v) {
  const uint32_t call = *reinterpret_cast<const volatile uint32_t*>(p.counter) + 1;
  const int64_t at = int64_t(call % 3) * p.n * p.slot_elems + int64_t(p.rank) * p.slot_elems + e;
  unsigned short bits = __bfloat16_as_ushort(v);
  if (bits == 0x8000u) bits = 0;  // -0.0 is the buffer's "not yet written"
  for (int r = 0; r < p.n; ++r)
    if (r != p.rank) static_cast<unsigned short*>(p.buf[r])[at] = bits;
}
#endif

}  // namespace servelab::kernels
