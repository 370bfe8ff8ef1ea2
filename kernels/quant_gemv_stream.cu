// quant_gemv's streaming kernel (quant_gemv.h; work split: quant_gemv_stream_plan.h): the decode
// products at M = 1–16 read each weight byte once and do little else, so the kernel is built to
// keep the memory system full rather than the tensor cores busy:
// - small blocks (4 warps), several a multiprocessor (__launch_bounds__ minimum 3) and a grid of
//   at least two blocks a multiprocessor (split-K where N is small), so one block's start and end
//   overlap other blocks' streams (the cp.async kernel in quant_gemv_mma.cu runs one block of 8
//   warps a multiprocessor, in waves that start and drain together);
// - weights straight into registers with 16-byte ld.global.nc.L1::no_allocate.L2::256B loads, a
//   rolling window of kU chunks a thread (4 x 64 bytes of FP8, 3 of INT4, plus INT4's group
//   scales and zeros) issued before the chunk they replace is computed: at least kU - 1 chunks
//   in flight per thread, ~96 KB a multiprocessor at 3 blocks;
// - the first window issued before the PDL wait, so the weight stream starts while the kernel
//   that writes x drains;
// - dequantization by bit tricks into mma.sync A fragments and x staged in shared memory once a
//   block in the fragments' permuted K order: quant_gemv_frag.cuh, shared with the mma kernel
//   (so both read a chunk the same way; the layout is described in quant_gemv_mma.cu).
#include <cuda_bf16.h>

#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/quant_gemv.h"
#include "kernels/quant_gemv_frag.cuh"
#include "kernels/quant_gemv_stream_plan.h"

namespace servelab::kernels {
namespace quant_gemv_stream_detail {  // named: the kernels library may be compiled as unity batches

namespace sp = quant_gemv_stream_plan;
using namespace quant_gemv_frag;
constexpr int kStreamPadElems = 32;  // 64 bytes of padding per staged row of x (no bank conflicts)
template <bool kInt4>
constexpr int kU = kInt4 ? 3 : 4;  // chunks in a thread's register window

struct StreamParams {
  QuantGemvArgs a;
  sp::Plan plan;
  int slice_stride;  // elements between staged rows of x
};

/// 16 streaming bytes: not kept in L1 (read once); the L2 fetches the row's 256-byte block, so the
/// next chunks of the row hit it.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/// Loads chunk c of this thread's four rows (and INT4's group scale and zero per row) into r.
template <bool kInt4>
__device__ __forceinline__ void load_chunk(ChunkRegs& r, const uint8_t* const (&rows)[kTiles][2],
                                           const int (&row_idx)[kTiles][2], int c, int lane_k,
                                           const QuantGemvArgs& a) {
  constexpr int ck = qp::chunk_k(kInt4);
  const int kb = c * ck;
  const bool in = kb + lane_k < a.k;  // FP8's last chunk may be partial (K is a multiple of 16)
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      r.w[t][h] = in ? ld_stream16(rows[t][h] + (kInt4 ? kb / 2 : kb)) : make_uint4(0, 0, 0, 0);
      if constexpr (kInt4) {
        const int64_t gi = int64_t(kb / a.group_size) * a.n + row_idx[t][h];
        r.scale[t][h] = __ldg(a.scales + gi);
        r.zero[t][h] = __ldg(a.zeros + gi);
      }
    }
}

template <bool kInt4, int kColTiles, typename OutT>
__global__ void __launch_bounds__(sp::kThreads, sp::kBlocksPerSm) quant_gemv_stream_kernel(const StreamParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ int last_block;
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  constexpr int U = kU<kInt4>;
  const QuantGemvArgs& a = p.a;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int rb = blockIdx.x, split = blockIdx.y;
  const int c0 = p.plan.chunk_begin(split), c1 = p.plan.chunk_begin(split + 1);
  const int lane_k = (kInt4 ? 32 : 16) * q;
  const int row0 = rb * sp::kBlockRows + warp * 32;
  const uint8_t* rows[kTiles][2];
  int row_idx[kTiles][2];
  warp_rows<kInt4>(a, row0, g, lane_k, rows, row_idx);

  ChunkRegs window[U];  // chunk c lives in window[(c - c0) % U]
#pragma unroll
  for (int u = 0; u < U; ++u)  // weights before x exists (PDL)
    if (c0 + u < c1) load_chunk<kInt4>(window[u], rows, row_idx, c0 + u, lane_k, a);
  float row_scale[kTiles][2];  // FP8: the channel's (or tensor's) scale
  warp_row_scales<kInt4>(a, row_idx, row_scale);
  pdl_wait();
  pdl_launch_dependents();
  stage_x<kInt4, sp::kThreads>(xs, a, c0, c1, p.slice_stride);
  __syncthreads();

  float acc[kTiles][2][4] = {};
  constexpr int ck = qp::chunk_k(kInt4);
  const __nv_bfloat16* xs_lane = xs + int64_t(min(g, a.m - 1)) * p.slice_stride;  // columns >= M dropped
  const int xs_tile1 = (min(8 + g, a.m - 1) - min(g, a.m - 1)) * p.slice_stride;
  for (int c = c0; c < c1; c += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c + u < c1) {
        const ChunkRegs r = window[u];
        if (c + u + U < c1) load_chunk<kInt4>(window[u], rows, row_idx, c + u + U, lane_k, a);
        mma_chunk<kInt4, kColTiles>(acc, r, xs_lane + (c + u - c0) * ck, xs_tile1, q);
      }
    }
  }

  finish_tiles<kInt4, kColTiles, sp::kMaxRows, sp::kBlockRows, OutT>(acc, row_scale, a, p.plan.splits, rb, split, row0,
                                                                    warp, g, q, last_block);
}

template <bool kInt4, int kColTiles, typename OutT>
void launch_stream_one(const StreamParams& p, size_t smem, cudaStream_t stream) {
  auto* kernel = quant_gemv_stream_kernel<kInt4, kColTiles, OutT>;
  static const bool configured = [&] {  // once per instantiation: the largest x slice
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    sp::kMaxRows * (sp::kMaxSliceK + kStreamPadElems) * 2));
    return true;
  }();
  (void)configured;
  launch_pdl(kernel, dim3(p.plan.row_blocks, p.plan.splits), dim3(sp::kThreads), smem, stream, p);
}

template <bool kInt4>
void launch_stream_format(const StreamParams& p, size_t smem, cudaStream_t stream) {
  const bool two = p.a.m > 8;
  if (p.a.out_bf16) two ? launch_stream_one<kInt4, 2, __nv_bfloat16>(p, smem, stream)
                        : launch_stream_one<kInt4, 1, __nv_bfloat16>(p, smem, stream);
  else two ? launch_stream_one<kInt4, 2, float>(p, smem, stream) : launch_stream_one<kInt4, 1, float>(p, smem, stream);
}

}  // namespace quant_gemv_stream_detail

void quant_gemv_stream(const QuantGemvArgs& a, const quant_gemv_stream_plan::Plan& plan, cudaStream_t stream) {
  using namespace quant_gemv_stream_detail;
  const bool int4 = a.kind == QuantWeightKind::int4;
  const StreamParams p{a, plan, sp::max_slice_k(int4, plan) + kStreamPadElems};
  const size_t smem = size_t(a.m) * p.slice_stride * 2;
  int4 ? launch_stream_format<true>(p, smem, stream) : launch_stream_format<false>(p, smem, stream);
}

}  // namespace servelab::kernels
