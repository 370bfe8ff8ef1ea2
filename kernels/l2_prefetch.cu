// kernels/l2_prefetch.h: bulk L2 prefetches of 16 KiB, one a thread, warps of 32 over up to 128
// blocks. A block retires only when its bulk prefetches have landed, and one SM's copy engine
// moves ~0.3 TB/s (an H200: 24 MiB from one warp took ~80 us), so the work is spread over blocks
// to move at the memory's rate.
#include "kernels/l2_prefetch.h"

#include <algorithm>
#include <stdexcept>

#include "kernels/cuda_check.h"

namespace servelab::kernels {
namespace {

constexpr int64_t kChunk = int64_t(16) << 10;
constexpr int kThreads = 32, kMaxBlocks = 128;

__global__ void l2_prefetch_kernel(const char* p, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * kChunk;
  for (int64_t off = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk; off < bytes; off += stride) {
    const uint32_t n = uint32_t(bytes - off < kChunk ? bytes - off : kChunk);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
  }
#endif
}

}  // namespace

void l2_prefetch(const void* p, int64_t bytes, cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(p) & 15) throw std::invalid_argument("l2_prefetch: p must be 16-byte aligned");
  bytes &= ~int64_t(15);
  if (bytes <= 0) return;
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
  const int blocks = int(std::min<int64_t>(kMaxBlocks, (chunks + kThreads - 1) / kThreads));
  l2_prefetch_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const char*>(p), bytes);
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
