// Slot-level copies of FP8 arenas (kv_fp8.h's layout: pages of 16 slots split by KV head), where a
// slot's rows and scales are not one run of bytes: copy-on-write of runs that are not whole pages,
// and the swaps' gather/scatter to and from a packed buffer (device staging or mapped pinned host
// memory) that keeps each slot together as [codes h0 | ... | codes h(n-1) | scales | pad], the
// slot's fp8_kv_slot_bytes(). Grid (slots, arenas): one CUDA block moves one slot of one arena,
// 16-byte pieces of its rows and 4-byte scales.
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/kv_fp8.h"

namespace servelab::kernels {
namespace kv_fp8_copy_detail {

constexpr int kThreads = 128;

/// One slot's pieces: n_kv rows of head_dim / 16 16-byte vectors, then n_kv scales.
/// kMode 0: arena -> arena (src_dst pairs); 1: arena -> packed; 2: packed -> arena.
template <int kMode>
__global__ void __launch_bounds__(kThreads) slots_kernel(void* const* arenas, int n_arenas, const int32_t* slots,
                                                         const Fp8KvLayout lay, int n_kv, int64_t slot_bytes, uint8_t* packed) {
  const int i = blockIdx.x, arena = blockIdx.y;
  uint8_t* base = static_cast<uint8_t*>(arenas[arena]);
  const int64_t a = kMode == 0 ? slots[2 * i] : slots[i];
  const int64_t b = kMode == 0 ? slots[2 * i + 1] : 0;
  uint8_t* pk = kMode == 0 ? nullptr : packed + (int64_t(i) * n_arenas + arena) * slot_bytes;
  const int vecs = lay.head_dim / 16, n_vec = n_kv * vecs;
  for (int k = threadIdx.x; k < n_vec + n_kv; k += kThreads) {
    if (k < n_vec) {
      const int h = k / vecs, c = (k % vecs) * 16;
      uint8_t* arena_at = base + lay.codes_at(a, h) + c;
      if constexpr (kMode == 0) *reinterpret_cast<Vec8*>(base + lay.codes_at(b, h) + c) = *reinterpret_cast<const Vec8*>(arena_at);
      else if constexpr (kMode == 1) *reinterpret_cast<Vec8*>(pk + int64_t(h) * lay.head_dim + c) = *reinterpret_cast<const Vec8*>(arena_at);
      else *reinterpret_cast<Vec8*>(arena_at) = *reinterpret_cast<const Vec8*>(pk + int64_t(h) * lay.head_dim + c);
    } else {
      const int h = k - n_vec;
      uint8_t* arena_at = base + lay.scale_at(a, h);
      uint8_t* pk_at = kMode == 0 ? base + lay.scale_at(b, h) : pk + int64_t(n_kv) * lay.head_dim + 4 * h;
      if constexpr (kMode == 2) *reinterpret_cast<float*>(arena_at) = *reinterpret_cast<const float*>(pk_at);
      else *reinterpret_cast<float*>(pk_at) = *reinterpret_cast<const float*>(arena_at);
    }
  }
}

void check(const char* who, int n_arenas, int n_kv, int head_dim) {
  if (n_arenas > 65535) throw std::invalid_argument(std::string(who) + ": at most 65535 arenas");
  if (n_kv < 1 || head_dim < 16 || head_dim % 16 != 0)
    throw std::invalid_argument(std::string(who) + ": n_kv_heads " + std::to_string(n_kv) + " and head_dim " +
                                std::to_string(head_dim) + " (a multiple of 16)");
}

template <int kMode>
void launch(const char* who, void* const* arenas, int n_arenas, const int32_t* slots, int n, int n_kv, int head_dim,
            uint8_t* packed, cudaStream_t stream) {
  check(who, n_arenas, n_kv, head_dim);
  if (n == 0 || n_arenas == 0) return;
  slots_kernel<kMode><<<dim3(n, n_arenas), kThreads, 0, stream>>>(arenas, n_arenas, slots, Fp8KvLayout::of(n_kv, head_dim),
                                                                  n_kv, fp8_kv_slot_bytes(n_kv, head_dim), packed);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kv_fp8_copy_detail

void copy_slots_fp8(void* const* arenas, int n_arenas, const int32_t* src_dst, int n_pairs, int n_kv_heads, int head_dim,
                    cudaStream_t stream) {
  kv_fp8_copy_detail::launch<0>("copy_slots_fp8", arenas, n_arenas, src_dst, n_pairs, n_kv_heads, head_dim, nullptr, stream);
}

void gather_slots_fp8(void* const* arenas, int n_arenas, const int32_t* slots, int n_slots, int n_kv_heads, int head_dim,
                      void* dst, cudaStream_t stream) {
  kv_fp8_copy_detail::launch<1>("gather_slots_fp8", arenas, n_arenas, slots, n_slots, n_kv_heads, head_dim,
                                static_cast<uint8_t*>(dst), stream);
}

void scatter_slots_fp8(void* const* arenas, int n_arenas, const int32_t* slots, int n_slots, int n_kv_heads, int head_dim,
                       const void* src, cudaStream_t stream) {
  kv_fp8_copy_detail::launch<2>("scatter_slots_fp8", arenas, n_arenas, slots, n_slots, n_kv_heads, head_dim,
                                const_cast<uint8_t*>(static_cast<const uint8_t*>(src)), stream);
}

}  // namespace servelab::kernels
