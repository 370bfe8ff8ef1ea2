// quant_gemv's packed kernel (quant_gemv.h): INT4 weights repacked into the order the mma
// fragments take them (kernels/int4_pack.h), M = 1-8. The work is cut as the steps kernel's
// (gemv_plan.h: a block of 8 warps owns 32 rows, two 16-row tiles, and its warps take the K steps
// of the block's slice in turn; sums in a fixed order, so a row's bits do not depend on M), with
// a warp step of 128 K values: per tile two 512-byte chunks (a lane's 16 bytes each: its A
// fragments for four mmas) and the step's group record (scales and 128 + zero of rows g, g + 8).
// Two ways to load (QuantGemvArgs::packed_stages):
// - 1 (the default): each warp loads its next step into registers (ld.global.nc, 16-byte vectors
//   and the records) while it computes the current one, three blocks a multiprocessor;
// - 2..4: a per-warp ring of that many shared-memory stages filled by cp.async, each lane copying
//   its own 16-byte pieces and reading back only what it copied (cp.async.wait_group, no
//   barrier), stages - 1 steps ahead: bytes in flight that cost no registers.
// The first step's loads are issued before the PDL wait. Per 32-bit word: (w >> 4i) & 0x000F000F |
// 0x43004300 is the bf16 pair 128 + q of fragment register a_i (a shift and one lop3), less the
// row's 128 + zero (one bf16 pair subtraction, exact); x's B fragments are its 16-byte vectors as
// they are in memory (no permutes). Each (tile, chunk) sums into its own registers (four mma
// chains), and the group scale multiplies each tile's fp32 sums of the step.
// Measured on an H200 (docs/quantization.md): slower than the steps kernel over llama2-7b's decode
// products (1.60 against 1.42 ms at one row since the one-lop3 nibbles; a ring filled by bulk
// copies, per warp or per block, was slower still: 1.72-1.83 ms, removed), so auto does not take
// it; the cuda backend repacks and runs it only with SERVELAB_QUANT_GEMV=packed.
#include <cuda_bf16.h>

#include <stdexcept>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/gemv_plan.h"
#include "kernels/gemv_reduce.cuh"
#include "kernels/int4_pack.h"
#include "kernels/quant_gemv.h"
#include "kernels/quant_gemv_frag.cuh"
#include "kernels/quant_gemv_rows.cuh"

namespace servelab::kernels {
namespace quant_gemv_packed_detail {  // named: the kernels library may be compiled as unity batches

using quant_gemv_frag::as_bf16x2;
using quant_gemv_frag::bf16x2_bits;
using quant_gemv_frag::mma_bf16;
constexpr int kWarps = gemv::kWarps, kThreads = gemv::kThreads;
constexpr int kStepK = 128;                                   // K values a warp step covers
constexpr int kStepChunks = kStepK / int4_pack::kChunkK;      // 2 chunks a tile a step
constexpr int kRecordVec = 2 * kStepChunks * 32;              // a stage: codes [tile][chunk][lane], then
constexpr int kStageVecs = kRecordVec + 2 * 32;               // records [tile][lane] (16-byte vectors)
constexpr int kDefaultPackedStages = 1;  // the register path (b7024c9: >= the 2-stage ring on QKV and O)

/// Blocks a multiprocessor the ring allows (dynamic shared memory 8 warps x stages x 3 KB, plus
/// the reduction's 8 KB): the kernel's __launch_bounds__ minimum.
template <int kStages>
constexpr int kMinBlocks = kStages >= 3 ? 2 : 3;

template <int kStages>
constexpr size_t ring_bytes() { return size_t(kWarps) * kStages * kStageVecs * 16; }

__device__ __forceinline__ void cp_async16(uint4* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/// This lane's copies of step s into a stage: its vector of each (tile, chunk) and the record of
/// its rows g, g + 8 for each tile.
__device__ __forceinline__ void issue_step(uint4* stage, const uint8_t* const (&codes)[2], const uint8_t* const (&groups)[2],
                                           int s, int group_steps, int lane) {
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int c = 0; c < kStepChunks; ++c)
      cp_async16(stage + (t * kStepChunks + c) * 32 + lane,
                 codes[t] + (int64_t(s) * kStepChunks + c) * int4_pack::kChunkBytes + lane * 16);
#pragma unroll
  for (int t = 0; t < 2; ++t)
    cp_async16(stage + kRecordVec + t * 32 + lane,
               groups[t] + (int64_t(s / group_steps) * 8 + (lane >> 2)) * int4_pack::kGroupRecordBytes);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

/// 128 + q of fragment register a_i of a packed word, as a bf16 pair (quant_gemv_frag.cuh's one-lop3
/// int4_pair_128: (w >> 4i) & 0x000F000F | 0x43004300).
template <int i>
__device__ __forceinline__ __nv_bfloat162 nibbles(uint32_t w) {
  return quant_gemv_frag::int4_pair_128<i>(w);
}

/// One step's operands: [tile][chunk] code vectors and each tile's group record.
struct StepOps {
  uint4 w[2][kStepChunks];
  uint4 rec[2];
};

__device__ __forceinline__ void load_stage(StepOps& o, const uint4* stage, int lane) {
#pragma unroll
  for (int t = 0; t < 2; ++t) {
#pragma unroll
    for (int c = 0; c < kStepChunks; ++c) o.w[t][c] = stage[(t * kStepChunks + c) * 32 + lane];
    o.rec[t] = stage[kRecordVec + t * 32 + lane];
  }
}

__device__ __forceinline__ uint4 ld_stream(const uint8_t* p) { return load_stream_256(p); }

/// The register path's loads of step s (the same pieces issue_step copies).
__device__ __forceinline__ void load_global(StepOps& o, const uint8_t* const (&codes)[2], const uint8_t* const (&groups)[2],
                                            int s, int group_steps, int lane) {
#pragma unroll
  for (int t = 0; t < 2; ++t) {
#pragma unroll
    for (int c = 0; c < kStepChunks; ++c)
      o.w[t][c] = ld_stream(codes[t] + (int64_t(s) * kStepChunks + c) * int4_pack::kChunkBytes + lane * 16);
    o.rec[t] = __ldg(reinterpret_cast<const uint4*>(groups[t] + (int64_t(s / group_steps) * 8 + (lane >> 2)) *
                                                                    int4_pack::kGroupRecordBytes));
  }
}

/// Adds one step's products (xr: x's row for this lane at the step's first K value + 16q) into
/// acc[tile][4], each tile's sums scaled by its rows' group scales. Each (tile, chunk) sums into
/// its own registers: four independent mma chains rather than two.
__device__ __forceinline__ void compute_step(float (&acc)[2][4], const StepOps& o, const __nv_bfloat16* xr) {
  float part[2][kStepChunks][4] = {};
#pragma unroll
  for (int c = 0; c < kStepChunks; ++c) {
    const uint4 x0 = __ldg(reinterpret_cast<const uint4*>(xr + c * int4_pack::kChunkK));
    const uint4 x1 = __ldg(reinterpret_cast<const uint4*>(xr + c * int4_pack::kChunkK + 8));
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const __nv_bfloat162 z0 = as_bf16x2(o.rec[t].z), z1 = as_bf16x2(o.rec[t].w);  // 128 + zero, rows g and g + 8
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t wj = word(o.w[t][c], j);
        const uint32_t a0 = bf16x2_bits(__hsub2(nibbles<0>(wj), z0)), a1 = bf16x2_bits(__hsub2(nibbles<1>(wj), z1));
        const uint32_t a2 = bf16x2_bits(__hsub2(nibbles<2>(wj), z0)), a3 = bf16x2_bits(__hsub2(nibbles<3>(wj), z1));
        const uint4& xv = j < 2 ? x0 : x1;  // K values 4j .. 4j + 3 of the lane's 16
        mma_bf16(part[t][c], a0, a1, a2, a3, (j & 1) ? xv.z : xv.x, (j & 1) ? xv.w : xv.y);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      acc[t][i] = fmaf(__uint_as_float(i < 2 ? o.rec[t].x : o.rec[t].y), part[t][0][i] + part[t][1][i], acc[t][i]);
}

/// This block's tiles (codes and group records) for row block rb.
__device__ __forceinline__ void block_tiles(const QuantGemvArgs& a, const int4_pack::Layout& lay, int rb,
                                            const uint8_t* (&codes)[2], const uint8_t* (&groups)[2]) {
#pragma unroll
  for (int t = 0; t < 2; ++t) {  // a tile past N (the last row block's second) reads the last one; dropped
    const int tile = min(quant_gemv_rows::tile_row(a, rb, t, 0) / int4_pack::kTileRows, lay.tiles() - 1);
    codes[t] = a.w_packed + int64_t(tile) * lay.chunks() * int4_pack::kChunkBytes;
    groups[t] = static_cast<const uint8_t*>(a.w_packed_groups) + int64_t(tile) * lay.groups() * 8 * int4_pack::kGroupRecordBytes;
  }
}

/// The register path (packed_stages 1): no ring; each warp loads its next step into registers
/// while it computes the current one.
template <typename OutT>
__global__ void __launch_bounds__(kThreads, 3) quant_gemv_packed_regs_kernel(const QuantGemvArgs a, const gemv::Plan plan) {
  __shared__ gemv::ReduceSmem sm;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int rb = blockIdx.x, split = blockIdx.y;
  const int4_pack::Layout lay{a.n, a.k, a.group_size};
  const uint8_t* codes[2];
  const uint8_t* groups[2];
  block_tiles(a, lay, rb, codes, groups);
  const int group_steps = a.group_size / kStepK;
  const __nv_bfloat16* xr = static_cast<const __nv_bfloat16*>(a.x) + int64_t(min(g, a.m - 1)) * a.x_stride + 16 * q;
  const int first = plan.split_begin(split) + warp, end = plan.split_begin(split + 1);
  float acc[2][4] = {};
  StepOps cur;
  if (first < end) load_global(cur, codes, groups, first, group_steps, lane);  // weights before the PDL wait
  pdl_wait();
  pdl_launch_dependents();
  for (int s = first; s < end; s += kWarps) {
    StepOps next;
    if (s + kWarps < end) load_global(next, codes, groups, s + kWarps, group_steps, lane);
    compute_step(acc, cur, xr + int64_t(s) * kStepK);
    cur = next;
  }
  quant_gemv_rows::finish<true, OutT>(sm, acc, a, plan, rb, split);
}

template <int kStages, typename OutT>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kStages>)
    quant_gemv_packed_kernel(const QuantGemvArgs a, const gemv::Plan plan) {
  extern __shared__ uint4 ring[];  // [warp][stage][kStageVecs]
  __shared__ gemv::ReduceSmem sm;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int rb = blockIdx.x, split = blockIdx.y;
  const int4_pack::Layout lay{a.n, a.k, a.group_size};
  const uint8_t* codes[2];
  const uint8_t* groups[2];
  block_tiles(a, lay, rb, codes, groups);
  const int group_steps = a.group_size / kStepK;
  const __nv_bfloat16* xr = static_cast<const __nv_bfloat16*>(a.x) + int64_t(min(g, a.m - 1)) * a.x_stride + 16 * q;
  uint4* my = ring + warp * kStages * kStageVecs;
  const int first = plan.split_begin(split) + warp, end = plan.split_begin(split + 1);
  const int n_mine = first < end ? (end - first + kWarps - 1) / kWarps : 0;
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {  // weights only: before the wait for the kernel that writes x
    if (i < n_mine) issue_step(my + i * kStageVecs, codes, groups, first + i * kWarps, group_steps, lane);
    cp_async_commit();
  }
  pdl_wait();
  pdl_launch_dependents();
  float acc[2][4] = {};
  int slot = 0, ahead_slot = kStages - 1;
  for (int i = 0; i < n_mine; ++i) {
    // The slot refilled here was read in the previous iteration, whose values the mmas consumed.
    if (i + kStages - 1 < n_mine)
      issue_step(my + ahead_slot * kStageVecs, codes, groups, first + (i + kStages - 1) * kWarps, group_steps, lane);
    cp_async_commit();
    cp_async_wait<kStages - 1>();  // step i's copies (this lane's) have landed
    StepOps o;
    load_stage(o, my + slot * kStageVecs, lane);
    compute_step(acc, o, xr + int64_t(first + i * kWarps) * kStepK);
    slot = slot + 1 == kStages ? 0 : slot + 1;
    ahead_slot = ahead_slot + 1 == kStages ? 0 : ahead_slot + 1;
  }
  quant_gemv_rows::finish<true, OutT>(sm, acc, a, plan, rb, split);
}

template <int kStages, typename OutT>
void launch_packed(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream) {
  static const bool configured = [] {  // more than 48 KB of dynamic shared memory: opt in once
    CUDA_CHECK(cudaFuncSetAttribute(quant_gemv_packed_kernel<kStages, OutT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(ring_bytes<kStages>())));
    return true;
  }();
  (void)configured;
  launch_pdl(quant_gemv_packed_kernel<kStages, OutT>, dim3(plan.row_blocks, plan.splits), kThreads, ring_bytes<kStages>(),
             stream, a, plan);
}

template <int kStages>
void launch_stages(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream) {
  if (a.out_bf16) launch_packed<kStages, __nv_bfloat16>(a, plan, stream);
  else launch_packed<kStages, float>(a, plan, stream);
}

void launch_regs(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  if (a.out_bf16) launch_pdl(quant_gemv_packed_regs_kernel<__nv_bfloat16>, grid, kThreads, 0, stream, a, plan);
  else launch_pdl(quant_gemv_packed_regs_kernel<float>, grid, kThreads, 0, stream, a, plan);
}

}  // namespace quant_gemv_packed_detail

gemv::Plan quant_gemv_packed_plan(const QuantGemvArgs& a, int n_sms) {
  const int target = a.stream_blocks_per_sm > 0 ? a.stream_blocks_per_sm : 1;  // split while under a block an SM
  return gemv::make_plan_steps(a.n, a.k / quant_gemv_packed_detail::kStepK, n_sms, target,
                               a.partials ? a.counter_capacity : 0, a.partials ? a.partial_capacity : 0, 1);
}

void quant_gemv_packed(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream) {
  using namespace quant_gemv_packed_detail;
  if (a.m > gemv::kMaxRows || !a.w_packed || !a.w_packed_groups || a.kind != QuantWeightKind::int4)
    throw std::invalid_argument("quant_gemv packed kernel: INT4 with w_packed and w_packed_groups, m <= 8");
  const int stages = a.packed_stages > 0 ? a.packed_stages : kDefaultPackedStages;
  if (stages == 1) launch_regs(a, plan, stream);
  else if (stages == 2) launch_stages<2>(a, plan, stream);
  else if (stages == 3) launch_stages<3>(a, plan, stream);
  else if (stages == 4) launch_stages<4>(a, plan, stream);
  else throw std::invalid_argument("quant_gemv packed kernel: packed_stages must be 0 or 1..4");
}

}  // namespace servelab::kernels
