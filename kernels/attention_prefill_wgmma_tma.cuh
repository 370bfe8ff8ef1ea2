#pragma once
// The TMA side of the warp-specialized prefill kernels (attention_prefill_wgmma_ws.cu): tensor maps
// over the K and V arenas (v6, fa10, fa11), the bulk tensor copy, and the mbarrier operations that
// count its bytes. Device helpers need sm_90 (the callers compile them under SERVELAB_WGMMA_DEVICE).
#include <cuda.h>  // CUtensorMap (the encoder comes through the runtime: no libcuda link)
#include <cudaTypedefs.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/attention_prefill_wgmma.cuh"
#include "kernels/common.cuh"

namespace servelab::kernels::prefill_wgmma {

/// The same without .noinc: the pending count goes up now and down when the copies land, so the
/// phase still needs its counted arrivals (v6's partial tile: thread 0 arrives after a barrier).
__device__ __forceinline__ void cp_async_arrive_inc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/// Arrives on bar and adds tx bytes the phase waits for (the TMA copies complete them).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t tx) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(tx) : "memory");
}
/// TMA: the box of map at (c0, c1, c2) into shared dst, completing tx bytes on bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

/// v6: K and V arenas as 3-D tensor maps (head_dim, kv heads, slots; box 64 x 1 x rows,
/// 128-byte swizzle: the layout the wgmma descriptors read), rows = 128 (naive layout, or paged
/// blocks of >= 128 slots; fa11: any layout, boxes only where a tile's 128 slots are consecutive) or
/// the block size (16, 32, 64).
struct TmaMaps {
  CUtensorMap k, v;
  int rows;
};

/// The encoder of tensor maps, from the driver through the runtime (once).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !f) throw std::runtime_error("prefill_attention_wgmma: no cuTensorMapEncodeTiled in the driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

/// Box rows of v6's tensor maps for this layout, 0 where TMA does not apply (paged blocks of
/// fewer than 16 slots or not a power of two: those take the cp.async producer, v5.1).
inline int tma_rows(const Params& p) {
  if (p.kv.kind == KvLayoutKind::naive) return kBN;
  return p.block_shift >= 4 ? std::min(p.kv.block_size, kBN) : 0;
}

/// The tensor map of one arena (K or V): box 64 x 1 x rows at (head_dim half, kv head, first slot).
template <typename T>
CUtensorMap encode_kv_map(const void* arena, const Params& p, int rows) {
  CUtensorMap m;
  const cuuint64_t dims[3] = {cuuint64_t(kHD), cuuint64_t(p.n_kv), cuuint64_t(p.n_slots)};
  const cuuint64_t strides[2] = {cuuint64_t(kHD) * sizeof(T), cuuint64_t(p.kv_row) * sizeof(T)};  // bytes, dims 1 and 2
  const cuuint32_t box[3] = {64, 1, cuuint32_t(rows)}, elem_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(&m, std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                          3, const_cast<void*>(arena), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::runtime_error("prefill_attention_wgmma: cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ")");
  return m;
}

}  // namespace servelab::kernels::prefill_wgmma
