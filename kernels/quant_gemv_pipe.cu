// quant_gemv's pipe kernel (quant_gemv.h; FP8 and INT4, M = 1-8): the steps kernel's step (the
// same loads, dequantization and mmas: quant_gemv_steps.cuh) in blocks of kW = 4 warps (8 with
// QuantGemvArgs::pipe_warps), each warp streaming its share of the block's K steps through two
// register buffers: the step after next is loaded right after a buffer is used, so the warp's
// loads are in flight while it computes (as gemv.cu's rolling variant). Why (Nsight Compute on an
// H200, docs/quantization.md): the steps kernel's warps take 2 steps each at K = 4096 (8 warps,
// 16 INT4 steps), so a warp loads, waits, computes, loads, waits; INT4's QKV runs in 1.45 waves
// of 2 blocks an SM (SMs idle 19% of the time) and its SMs issue on 35% of cycles, long-scoreboard
// stalls first. Here a block of 4 warps owns the same 32 rows, so a warp takes twice the steps with
// its loads overlapped, an SM holds 4 blocks (128 registers: INT4's scales and zeros shared by the
// quad, StepCodesQuad), and the plan (quant_gemv_pipe_plan.h) fits the blocks to waves.
// The block's sums: its warps' accumulators added in warp order, then split K's slices in slice
// order (partials and a self-resetting counter per row block, as gemv_reduce.cuh), so a row's bits
// do not depend on M; FP8's scale on the row's total; or silu(gate) · up (QuantGemvArgs::silu_ffn).
#include <cuda_bf16.h>

#include <stdexcept>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/cuda_check.h"
#include "kernels/gemv_plan.h"
#include "kernels/quant_gemv.h"
#include "kernels/quant_gemv_frag.cuh"
#include "kernels/quant_gemv_pipe_plan.h"
#include "kernels/quant_gemv_rows.cuh"
#include "kernels/quant_gemv_steps.cuh"

namespace servelab::kernels {
namespace quant_gemv_pipe_detail {  // named: the kernels library may be compiled as unity batches

using namespace quant_gemv_steps_detail;
constexpr int kOutputs = gemv::kPartialFloats;  // a block's outputs: 8 rows of x (m) x 32 rows of w

constexpr int kRedStride = gemv::kBlockRows + 4;  // a warp's stores of one accumulator hit 32 banks

template <int kW>
struct PipeSmem {
  float red[kW][gemv::kMaxRows][kRedStride];  // [warp][m][row]
  float sums[kOutputs];     // the block's totals (fused SiLU pairs gate and up rows through it)
  int last_block;
};

/// Sums the block's accumulators and stores its outputs (see the top of the file).
template <bool kInt4, int kW, typename OutT>
__device__ __forceinline__ void finish(PipeSmem<kW>& sm, const float (&acc)[2][4], const QuantGemvArgs& a,
                                       const gemv::Plan& plan, int rb, int split) {
  constexpr int kThreads = kW * 32, kPer = kOutputs / kThreads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int t = 0; t < 2; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      sm.red[warp][gemv::acc_col(q, i)][t * 16 + gemv::acc_row(g, i)] = acc[t][i];
  __syncthreads();
  float sum[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    sum[j] = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kW; ++wi) sum[j] += sm.red[wi][(tid + j * kThreads) / gemv::kBlockRows][tid % gemv::kBlockRows];
  }
  if (plan.splits > 1) {
    float* part = a.partials + int64_t(rb) * plan.splits * kOutputs;
#pragma unroll
    for (int j = 0; j < kPer; ++j) part[split * kOutputs + tid + j * kThreads] = sum[j];
    __threadfence();  // this block's partials visible device-wide before it is counted
    __syncthreads();
    if (tid == 0) sm.last_block = atomicAdd(&a.counters[rb], 1) == plan.splits - 1;
    __syncthreads();
    if (!sm.last_block) return;
    __threadfence();
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      sum[j] = 0.0f;
      for (int sp = 0; sp < plan.splits; ++sp) sum[j] += __ldcg(part + sp * kOutputs + tid + j * kThreads);  // slice order
    }
    if (tid == 0) a.counters[rb] = 0;  // ready for the next launch (stream order)
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int o = tid + j * kThreads, r = o % gemv::kBlockRows, nn = quant_gemv_rows::block_row(a, rb, r);
    if constexpr (!kInt4) sum[j] *= __ldg(a.scales + (a.n_scales == 1 ? 0 : min(nn, a.n - 1)));
    sm.sums[o] = sum[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int o = tid + j * kThreads, mm = o / gemv::kBlockRows, r = o % gemv::kBlockRows;
    if (mm >= a.m) continue;
    if (a.silu_ffn > 0) {  // gate row 16 rb + r (tile 0) with its up row (tile 1: r + 16)
      const int col = rb * 16 + r;
      if (r < 16 && col < a.silu_ffn) {  // each half rounded as the stored gate_up would be
        const float gate = __bfloat162float(__float2bfloat16_rn(sm.sums[o]));
        const float up = __bfloat162float(__float2bfloat16_rn(sm.sums[o + 16]));
        store_out<OutT>(a.y, int64_t(mm) * a.silu_ffn + col, gate / (1.0f + expf(-gate)) * up, false);
      }
    } else {
      const int nn = quant_gemv_rows::block_row(a, rb, r);
      if (nn < a.n) store_out<OutT>(a.y, int64_t(mm) * a.n + nn, sm.sums[o], a.accumulate);
    }
  }
}

template <bool kInt4, int kW, typename OutT>
__global__ void __launch_bounds__(kW * 32, 16 / kW) quant_gemv_pipe_kernel(const QuantGemvArgs a, const gemv::Plan plan) {
  using Codes = std::conditional_t<kInt4, StepCodesQuad, StepCodes>;
  __shared__ PipeSmem<kW> sm;
  constexpr int kStep = kStepK<kInt4>;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int rb = blockIdx.x, split = blockIdx.y, lane_k = q * kVecK<kInt4>;
  const uint8_t* rows[2][2];
  int row_idx[2][2];
  block_rows<kInt4>(a, rb, g, lane_k, rows, row_idx);
  const __nv_bfloat16* xr = static_cast<const __nv_bfloat16*>(a.x) + int64_t(min(g, a.m - 1)) * a.x_stride + lane_k;

  float acc[2][4] = {};
  const int end = plan.split_begin(split + 1), full = a.k / kStep, lim = min(end, full);
  int s = plan.split_begin(split) + warp;
  Codes ca, cb;  // steps s and s + kW
  bool have_a = s < lim, have_b = s + kW < lim;
  if (have_a) load_codes<kInt4, false>(ca, rows, row_idx, s * kStep, lane_k, a);  // before the PDL wait
  if (have_b) load_codes<kInt4, false>(cb, rows, row_idx, (s + kW) * kStep, lane_k, a);
  pdl_wait();
  pdl_launch_dependents();
  while (have_a) {
    mma_codes<kInt4, false>(acc, ca, xr + int64_t(s) * kStep, 0, 0);
    const bool next_a = s + 2 * kW < lim;
    if (next_a) load_codes<kInt4, false>(ca, rows, row_idx, (s + 2 * kW) * kStep, lane_k, a);
    if (!have_b) {
      s += kW;
      break;
    }
    mma_codes<kInt4, false>(acc, cb, xr + int64_t(s + kW) * kStep, 0, 0);
    const bool next_b = s + 3 * kW < lim;
    if (next_b) load_codes<kInt4, false>(cb, rows, row_idx, (s + 3 * kW) * kStep, lane_k, a);
    s += 2 * kW;
    have_a = next_a;
    have_b = next_b;
  }
  for (; s < end; s += kW) {  // the partial last step (K not a multiple of the step)
    Codes r;
    load_codes<kInt4, true>(r, rows, row_idx, s * kStep, lane_k, a);
    mma_codes<kInt4, true>(acc, r, xr + int64_t(s) * kStep, s * kStep + lane_k, a.k);
  }
  finish<kInt4, kW, OutT>(sm, acc, a, plan, rb, split);
}

template <bool kInt4, int kW>
void launch(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream) {
  const dim3 grid(plan.row_blocks, plan.splits);
  if (a.out_bf16) launch_pdl(quant_gemv_pipe_kernel<kInt4, kW, __nv_bfloat16>, grid, kW * 32, 0, stream, a, plan);
  else launch_pdl(quant_gemv_pipe_kernel<kInt4, kW, float>, grid, kW * 32, 0, stream, a, plan);
}

}  // namespace quant_gemv_pipe_detail

int quant_gemv_pipe_warps(const QuantGemvArgs& a) { return a.pipe_warps == 8 ? 8 : 4; }

gemv::Plan plan_quant_gemv_pipe(const QuantGemvArgs& a, int n_sms) {
  const bool int4 = a.kind == QuantWeightKind::int4;
  const int step_k = int4 ? quant_gemv_steps_detail::kStepK<true> : quant_gemv_steps_detail::kStepK<false>;
  const int warps = quant_gemv_pipe_warps(a);
  return quant_gemv_pipe_plan::make_plan((a.n + gemv::kBlockRows - 1) / gemv::kBlockRows, (a.k + step_k - 1) / step_k,
                                         warps, n_sms * (16 / warps), a.partials ? a.counter_capacity : 0,
                                         a.partials ? a.partial_capacity : 0);
}

void quant_gemv_pipe(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream) {
  using namespace quant_gemv_pipe_detail;
  if (a.m > gemv::kMaxRows) throw std::invalid_argument("quant_gemv pipe kernel: m must be <= 8");
  const bool int4 = a.kind == QuantWeightKind::int4;
  if (quant_gemv_pipe_warps(a) == 8) int4 ? launch<true, 8>(a, plan, stream) : launch<false, 8>(a, plan, stream);
  else int4 ? launch<true, 4>(a, plan, stream) : launch<false, 4>(a, plan, stream);
}

}  // namespace servelab::kernels
