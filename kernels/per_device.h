#pragma once
// Per-device one-time settings. cudaFuncSetAttribute (e.g. a kernel's opt-in to more than 48 KB of
// dynamic shared memory) applies to the calling thread's current device only: a process-wide
// `static` done once sets it on the first device a kernel ran on and leaves every other device
// refusing the launch (invalid argument) -- which tensor parallelism, a rank per GPU in one
// process, hits on rank 1 (issue 25). once_per_device runs `set` once per device ordinal (< 64).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda_check.h"

namespace servelab::kernels {

template <typename F>
void once_per_device(std::atomic<uint64_t>& done, F&& set) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (done.load(std::memory_order_acquire) & bit) return;
  set();  // idempotent: two threads racing on one device both set the same value
  done.fetch_or(bit, std::memory_order_acq_rel);
}

}  // namespace servelab::kernels
