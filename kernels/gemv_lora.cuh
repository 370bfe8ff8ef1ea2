#pragma once
// LoRA inside the decode gemv (LoraSgmvConfig::in_product, gemv.cu's kLora kernels): the grid's
// first shrink.blocks blocks run the product's grouped shrink (the plan's (row, chunk) items, or
// (tile, chunk), each row's or tile's xa finished by its last chunk: kernels/lora_shrink_item.cuh) and count
// themselves done; the other blocks are the product's, unchanged until their epilogue, where the
// block that finishes a row block waits for that count and adds each output's delta,
// Σ_k xa[row, seg · r + k] · B[slot, col, k], to its fp32 sum before rounding, RoPE or SiLU·mul.
// So a product with an adapter launches nothing more than the product: it still streams its
// weights while the kernel before it drains (PDL), and the shrink runs in the first wave beside
// them. No deadlock: the shrink blocks have the lowest indices (dispatched first, as CUB's
// decoupled look-back relies on), never wait, and the kernel after (PDL) launches only once
// every block has started and passed its own wait.
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/lora_delta.cuh"
#include "kernels/lora_shrink_item.cuh"

namespace servelab::kernels::gemv {

__device__ __forceinline__ int load_acquire_gpu(const int32_t* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/// Shrink block b (< s.blocks): its items, each tile's xa finished by the tile's last chunk, then
/// the count. x: the product's input [n_rows, n_in], written by the kernel before (PDL wait).
template <typename T>
__device__ __forceinline__ void lora_shrink_block(const LoraGemvShrink& s, int total, const T* x, int b) {
  pdl_wait();
  const T* a = static_cast<const T*>(s.a);
  if (s.row_items) {  // items (perm position, chunk): a tile's rows over as many blocks
    const int n_with = s.n_tiles[1];
    for (int w = b; w < n_with * s.n_chunks; w += s.blocks) {
      const int p = w % n_with, slot = s.perm_slot[p];
      lora_detail::shrink_rows<T>(x, s.perm, s.n_rows, a, s.n_in, total, s.chunk_len, s.partial, slot, p, 1,
                                  w / n_with);
      lora_detail::shrink_finish_rows(s.perm, s.n_rows, total, s.n_chunks, s.partial, s.scale, s.tile_done + p,
                                      s.xa_rows, slot, p, 1);
    }
  } else {
    const int n_t = *s.n_tiles;
    for (int w = b; w < n_t * s.n_chunks; w += s.blocks) {
      lora_detail::shrink_item<T>(x, s.tiles, s.perm, s.n_rows, a, s.n_in, total, s.chunk_len, s.partial, w % n_t,
                                  w / n_t);
      lora_detail::shrink_finish(s.tiles, s.perm, s.n_rows, total, s.n_chunks, s.partial, s.scale, s.tile_done,
                                 s.xa_rows, w % n_t);
    }
  }
  __threadfence();  // this block's xa rows before its count
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(s.done, 1);
}

/// Every thread of a block that finishes one of the product's row blocks: returns once every
/// shrink block has counted itself done (the count is zeroed by the next step's lora_plan).
__device__ __forceinline__ void lora_wait_shrink(const LoraGemvShrink& s) {
  if (threadIdx.x == 0)
    while (load_acquire_gpu(s.done) < s.blocks) __nanosleep(32);
  __syncthreads();
}

/// What a thread's delta needs before the shrink is done: its row's slot (-1: no delta) and its
/// output column's first 16 ranks of B, loaded while the block sums its warps.
struct LoraEpilogue {
  int slot = -1;
  int col = -1;
  Vec8 b[2];
};

/// Row mm's slot and B at output column col (col < 0 or mm >= m: no delta).
template <typename T>
__device__ __forceinline__ LoraEpilogue lora_prefetch(const LoraXaDelta& d, int m, int mm, int col) {
  LoraEpilogue e;
  if (mm >= m || col < 0) return e;
  e.slot = d.row_slot[mm];
  e.col = col;
  if (e.slot < 0 || d.max_rank % 8 != 0) return e;
  const T* b = static_cast<const T*>(d.b) + (int64_t(e.slot) * d.n_out + col) * d.max_rank;
#pragma unroll
  for (int q = 0; q < 2; ++q)
    if (q * 8 < d.max_rank) e.b[q] = __ldg(reinterpret_cast<const Vec8*>(b + q * 8));
  return e;
}

/// sum + the delta lora_prefetch set up: Σ_k xa[mm, seg · r + k] · B[slot, col, k], xa read
/// through L2 (written by other blocks of this kernel), in k order.
template <typename T>
__device__ __forceinline__ float lora_add_delta(const LoraXaDelta& d, const LoraEpilogue& e, int mm, float sum) {
  if (e.slot < 0) return sum;
  const int seg = (e.col >= d.seg_end0) + (e.col >= d.seg_end1);
  const float* xa = d.xa + int64_t(mm) * d.total + seg * d.max_rank;
  const T* b = static_cast<const T*>(d.b) + (int64_t(e.slot) * d.n_out + e.col) * d.max_rank;
  float acc = 0.0f;
  if (d.max_rank % 8 == 0) {
    for (int k = 0; k < d.max_rank; k += 8) {
      float bf[8];
      unpack8<T>(k < 16 ? e.b[k / 8] : __ldg(reinterpret_cast<const Vec8*>(b + k)), bf);
      const float4 x0 = __ldcg(reinterpret_cast<const float4*>(xa + k));
      const float4 x1 = __ldcg(reinterpret_cast<const float4*>(xa + k + 4));
      acc += x0.x * bf[0] + x0.y * bf[1] + x0.z * bf[2] + x0.w * bf[3] + x1.x * bf[4] + x1.y * bf[5] + x1.z * bf[6] +
             x1.w * bf[7];
    }
  } else {
    for (int k = 0; k < d.max_rank; ++k) acc += __ldcg(xa + k) * to_float<T>(b[k]);
  }
  return sum + acc;
}

}  // namespace servelab::kernels::gemv
