#pragma once
// Weights into L2 ahead of the product that reads them (decode steps): while a step runs kernels
// that leave the memory bus idle (attention over short contexts, the all-reduce, the norms), a
// prefetch of the next product's weights fills that time, and the product then streams part of
// its bytes from L2 instead of HBM.
#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::kernels {

/// Asks the L2 cache to fetch [p, p + bytes) (sm_90's cp.async.bulk.prefetch.L2: no output and no
/// completion to wait for, a hint the memory system may drop), 16 KiB a thread, on `stream`.
/// p must be 16-byte aligned; bytes is rounded down to a multiple of 16. Nothing below sm_90.
void l2_prefetch(const void* p, int64_t bytes, cudaStream_t stream);

}  // namespace servelab::kernels
