// quant_gemv's tensor-core kernel (quant_gemv.h; work split: quant_gemv_plan.h): the quantized
// weights are the A operand of mma.sync.m16n8k16 (bf16), dequantized in registers, and x's rows
// the n = 8 columns of B (two column tiles for M = 9..16), so every weight load serves all M rows.
//
// Per chunk (quant_gemv_plan.h) a lane (g = lane / 4, q = lane % 4) loads one streaming 16-byte
// vector from each of its four rows (tile t, row g or g + 8): FP8 k = kb + 16q .. + 15, INT4 kb +
// 32q .. + 31. A sum over K may take K in any order as long as A and B agree, so the fragments
// take the values in the order the bit tricks below produce them, and x is staged in shared
// memory already permuted to that order:
// - FP8 E4M3 -> bf16 without conversion instructions: a 32-bit word of bytes b0..b3 gives the
//   pairs (b1, b3) as (w & 0x80008000) | ((w & 0x7f007f00) >> 4) and (b0, b2) the same from w << 8:
//   sign, exponent and mantissa moved into bf16's fields, which reads as the value · 2^-120 (E4M3
//   subnormals land on bf16 subnormals, also exact); one bf16 multiply by 2^120 makes them normal
//   (exact). The per-tensor or per-channel scale multiplies the fp32 sums at the end.
// - INT4 -> bf16 by the exponent trick: (w >> 4e) & 0x000f000f | 0x43004300 is the bf16 pair
//   (128 + nibble e, 128 + nibble e + 4), minus (128 + zero) exactly the integers q - zero. A chunk
//   is one 128-group, so its sums are multiplied by the group's scale in fp32 once per chunk.
// Hence x's shared-memory order: per chunk, 16-byte units (p, q) of 8 values, p the lane's word
// (INT4) or word pair (FP8), holding k = [0,4,1,5,2,6,3,7] (INT4) or [0,2,1,3, 4,6,5,7] (FP8) of
// its 8 consecutive k; one unit is one ld.shared.v4 per lane and column tile, and the four lanes
// of a quad read 64 contiguous bytes (rows padded by 64 bytes: no bank conflicts).
// The weights reach registers through shared memory: each thread copies its own four vectors
// (and INT4's scales and zeros) of a chunk with cp.async into its slots of a ring of kStages
// chunks and reads them back itself, so the ring needs no barrier, only cp.async.wait_group; the
// registers no longer bound the bytes in flight (kStages - 1 chunks a thread: 7 x 64 bytes of
// FP8, 5 of INT4; one block of 8 warps a multiprocessor). The first kStages - 1 chunks are
// issued before the PDL wait, so the weight stream starts while the kernel that writes x drains.
#include <cuda_bf16.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/quant_gemv.h"
#include "kernels/quant_gemv_frag.cuh"
#include "kernels/quant_gemv_plan.h"

namespace servelab::kernels {
namespace quant_gemv_mma_detail {  // named: the kernels library may be compiled as unity batches

namespace qp = quant_gemv_plan;
using namespace quant_gemv_frag;
constexpr int kPadElems = 32;  // 64 bytes of padding per staged row of x
/// Chunks in the cp.async ring: the shared memory left beside the largest x slice (16 rows x 2080
/// x 2 B) with one block a multiprocessor.
template <bool kInt4>
constexpr int kStages = kInt4 ? 6 : 8;
constexpr int kVectors = kTiles * 2;  // 16-byte vectors a thread copies per chunk
/// Ring bytes per chunk: vectors [kVectors][kThreads] x 16 B, then INT4's scale and zero per
/// vector [2 * kVectors][kThreads] x 4 B (thread-major rows: a warp's accesses are contiguous).
template <bool kInt4>
constexpr int kStageBytes = qp::kThreads * (kVectors * 16 + (kInt4 ? 2 * kVectors * 4 : 0));
template <bool kInt4>
constexpr int kRingBytes = kStages<kInt4> * kStageBytes<kInt4>;

struct Params {
  QuantGemvArgs a;
  qp::Plan plan;
  int slice_stride;  // elements between staged rows of x
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Streams 16 bytes into shared memory (zeros when !in; the L2 fetches the 256-byte block, the
/// row's next chunks included).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool in) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(in ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

/// Issues chunk c of this thread's rows (row pointers at the lane's first byte of each row) into
/// ring stage `stage`.
template <bool kInt4>
__device__ __forceinline__ void issue_chunk(unsigned char* ring, int stage, const uint8_t* const (&rows)[kTiles][2],
                                            const int (&row_idx)[kTiles][2], int c, int lane_k,
                                            const QuantGemvArgs& a) {
  constexpr int ck = qp::chunk_k(kInt4);
  const int kb = c * ck, tid = threadIdx.x;
  const bool in = kb + lane_k < a.k;  // FP8's last chunk may be partial (K is a multiple of 16)
  unsigned char* base = ring + stage * kStageBytes<kInt4>;
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int v = 2 * t + h;
      const uint8_t* src = rows[t][h] + (in ? (kInt4 ? kb / 2 : kb) : 0);
      cp_async16(smem_addr(base + (v * qp::kThreads + tid) * 16), src, in);
      if constexpr (kInt4) {
        const int64_t gi = int64_t(kb / a.group_size) * a.n + row_idx[t][h];
        float* sz = reinterpret_cast<float*>(base + kVectors * qp::kThreads * 16);
        cp_async4(smem_addr(sz + (2 * v) * qp::kThreads + tid), a.scales + gi);
        cp_async4(smem_addr(sz + (2 * v + 1) * qp::kThreads + tid), a.zeros + gi);
      }
    }
}

/// Reads back what this thread copied into ring stage `stage`.
template <bool kInt4>
__device__ __forceinline__ void read_chunk(ChunkRegs& r, const unsigned char* ring, int stage) {
  const int tid = threadIdx.x;
  const unsigned char* base = ring + stage * kStageBytes<kInt4>;
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int v = 2 * t + h;
      r.w[t][h] = *reinterpret_cast<const uint4*>(base + (v * qp::kThreads + tid) * 16);
      if constexpr (kInt4) {
        const float* sz = reinterpret_cast<const float*>(base + kVectors * qp::kThreads * 16);
        r.scale[t][h] = sz[(2 * v) * qp::kThreads + tid];
        r.zero[t][h] = sz[(2 * v + 1) * qp::kThreads + tid];
      }
    }
}

template <bool kInt4, int kColTiles, typename OutT>
__global__ void __launch_bounds__(qp::kThreads, qp::kBlocksPerSm) quant_gemv_mma_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ int last_block;
  unsigned char* ring = smem_raw;
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem_raw + kRingBytes<kInt4>);
  constexpr int kS = kStages<kInt4>;
  const QuantGemvArgs& a = p.a;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int rb = blockIdx.x, split = blockIdx.y;
  const int c0 = p.plan.chunk_begin(split), c1 = p.plan.chunk_begin(split + 1);
  const int lane_k = (kInt4 ? 32 : 16) * q;
  const int row0 = rb * qp::kBlockRows + warp * 32;
  const uint8_t* rows[kTiles][2];
  int row_idx[kTiles][2];
  warp_rows<kInt4>(a, row0, g, lane_k, rows, row_idx);

  float row_scale[kTiles][2];  // FP8: the channel's (or tensor's) scale, fetched with the weights
  warp_row_scales<kInt4>(a, row_idx, row_scale);
#pragma unroll
  for (int u = 0; u < kS - 1; ++u) {  // weights before x exists (PDL); one group per chunk, even empty
    if (c0 + u < c1) issue_chunk<kInt4>(ring, u, rows, row_idx, c0 + u, lane_k, a);
    cp_async_commit();
  }
  pdl_wait();
  pdl_launch_dependents();
  stage_x<kInt4, qp::kThreads>(xs, a, c0, c1, p.slice_stride);
  __syncthreads();

  float acc[kTiles][2][4] = {};
  constexpr int ck = qp::chunk_k(kInt4);
  const __nv_bfloat16* xs_lane = xs + int64_t(min(g, a.m - 1)) * p.slice_stride;  // columns >= M dropped
  const int xs_tile1 = (min(8 + g, a.m - 1) - min(g, a.m - 1)) * p.slice_stride;
  int stage = 0;
  for (int c = c0; c < c1; ++c) {
    cp_async_wait<kS - 2>();  // chunk c's group (this thread's own copies) has landed
    ChunkRegs r;
    read_chunk<kInt4>(r, ring, stage);
    const int next = stage == 0 ? kS - 1 : stage - 1;  // the stage read last iteration
    if (c + kS - 1 < c1) issue_chunk<kInt4>(ring, next, rows, row_idx, c + kS - 1, lane_k, a);
    cp_async_commit();
    mma_chunk<kInt4, kColTiles>(acc, r, xs_lane + (c - c0) * ck, xs_tile1, q);
    stage = stage == kS - 1 ? 0 : stage + 1;
  }
  cp_async_wait<0>();

  finish_tiles<kInt4, kColTiles, qp::kMaxRows, qp::kBlockRows, OutT>(acc, row_scale, a, p.plan.splits, rb, split, row0,
                                                                    warp, g, q, last_block);
}

template <bool kInt4, int kColTiles, typename OutT>
void launch_one(const Params& p, size_t smem, cudaStream_t stream) {
  auto* kernel = quant_gemv_mma_kernel<kInt4, kColTiles, OutT>;
  static const bool configured = [&] {  // once per instantiation: the ring and the largest x slice
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kRingBytes<kInt4> + qp::kMaxRows * (qp::kMaxSliceK + kPadElems) * 2));
    return true;
  }();
  (void)configured;
  launch_pdl(kernel, dim3(p.plan.row_blocks, p.plan.splits), dim3(qp::kThreads), smem, stream, p);
}

template <bool kInt4>
void launch_format(const Params& p, size_t smem, cudaStream_t stream) {
  const bool two = p.a.m > 8;
  if (p.a.out_bf16) two ? launch_one<kInt4, 2, __nv_bfloat16>(p, smem, stream)
                        : launch_one<kInt4, 1, __nv_bfloat16>(p, smem, stream);
  else two ? launch_one<kInt4, 2, float>(p, smem, stream) : launch_one<kInt4, 1, float>(p, smem, stream);
}

}  // namespace quant_gemv_mma_detail

/// Shared memory of the tensor-core kernel for a and its plan (quant_gemv.cu decides to use it).
size_t quant_gemv_mma_smem(const QuantGemvArgs& a, const quant_gemv_plan::Plan& plan) {
  const bool int4 = a.kind == QuantWeightKind::int4;
  using namespace quant_gemv_mma_detail;
  const int stride = quant_gemv_plan::max_slice_k(int4, plan) + kPadElems;
  return size_t(int4 ? kRingBytes<true> : kRingBytes<false>) + size_t(a.m) * stride * 2;
}

void quant_gemv_mma(const QuantGemvArgs& a, const quant_gemv_plan::Plan& plan, cudaStream_t stream) {
  using namespace quant_gemv_mma_detail;
  const bool int4 = a.kind == QuantWeightKind::int4;
  Params p{a, plan, quant_gemv_plan::max_slice_k(int4, plan) + kPadElems};
  const size_t smem = quant_gemv_mma_smem(a, plan);
  int4 ? launch_format<true>(p, smem, stream) : launch_format<false>(p, smem, stream);
}

}  // namespace servelab::kernels
