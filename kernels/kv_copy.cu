// Block-level KV copies: copy-on-write inside the arenas, and the gather/scatter of swap lists
// to and from a packed buffer (device staging or mapped pinned host memory). Grid (blocks,
// arenas): one CUDA block moves one KV block of one arena with 16-byte accesses.
#include <stdexcept>

#include "kernels/common.cuh"
#include "kernels/ops.h"

namespace servelab::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void copy_blocks_kernel(void* const* arenas, const int32_t* src_dst, int64_t block_vecs) {
  const int pair = blockIdx.x, arena = blockIdx.y;
  Vec8* base = static_cast<Vec8*>(arenas[arena]);
  const Vec8* src = base + int64_t(src_dst[2 * pair]) * block_vecs;
  Vec8* dst = base + int64_t(src_dst[2 * pair + 1]) * block_vecs;
  for (int64_t i = threadIdx.x; i < block_vecs; i += kThreads) dst[i] = src[i];
}

/// kOut: arena -> packed; else packed -> arena.
template <bool kOut>
__global__ void swap_kernel(void* const* arenas, int n_arenas, const int32_t* blocks, int64_t block_vecs,
                            Vec8* packed) {
  const int i = blockIdx.x, arena = blockIdx.y;
  Vec8* a = static_cast<Vec8*>(arenas[arena]) + int64_t(blocks[i]) * block_vecs;
  Vec8* p = packed + (int64_t(i) * n_arenas + arena) * block_vecs;
  for (int64_t k = threadIdx.x; k < block_vecs; k += kThreads) {
    if (kOut) p[k] = a[k];
    else a[k] = p[k];
  }
}

void check(int n_arenas, int64_t block_bytes) {
  if (block_bytes % 16 != 0) throw std::invalid_argument("KV block copies: block_bytes must be a multiple of 16");
  if (n_arenas > 65535) throw std::invalid_argument("KV block copies: at most 65535 arenas");
}

}  // namespace

void copy_blocks(void* const* arenas, int n_arenas, const int32_t* src_dst, int n_pairs, int64_t block_bytes,
                 cudaStream_t stream) {
  check(n_arenas, block_bytes);
  if (n_pairs == 0 || n_arenas == 0) return;
  copy_blocks_kernel<<<dim3(n_pairs, n_arenas), kThreads, 0, stream>>>(arenas, src_dst, block_bytes / 16);
  CUDA_CHECK_LAUNCH();
}

void gather_blocks(void* const* arenas, int n_arenas, const int32_t* blocks, int n_blocks, int64_t block_bytes,
                   void* dst, cudaStream_t stream) {
  check(n_arenas, block_bytes);
  if (n_blocks == 0 || n_arenas == 0) return;
  swap_kernel<true><<<dim3(n_blocks, n_arenas), kThreads, 0, stream>>>(arenas, n_arenas, blocks, block_bytes / 16,
                                                                       static_cast<Vec8*>(dst));
  CUDA_CHECK_LAUNCH();
}

void scatter_blocks(void* const* arenas, int n_arenas, const int32_t* blocks, int n_blocks, int64_t block_bytes,
                    const void* src, cudaStream_t stream) {
  check(n_arenas, block_bytes);
  if (n_blocks == 0 || n_arenas == 0) return;
  swap_kernel<false><<<dim3(n_blocks, n_arenas), kThreads, 0, stream>>>(arenas, n_arenas, blocks, block_bytes / 16,
                                                                        const_cast<Vec8*>(static_cast<const Vec8*>(src)));
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
