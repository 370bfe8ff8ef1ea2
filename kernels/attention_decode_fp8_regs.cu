// Decode attention over an FP8 KV arena on tensor cores with each step's codes loaded straight into
// the registers its fragments need (Fp8KvDecode::mma_regs): no shared-memory stage and no
// bulk copies. attention_decode_fp8_async.cu's arithmetic with f16 operands (mma_async4f's: codes to
// f16 by cvt, Q times a power of two, P times the ratio of V scales), fed by plain 16-byte loads
// issued kDepth (2) steps ahead of the step they hold, 2 blocks an SM (232 registers). One step
// ahead at 3 blocks an SM (168 registers, 32 bytes spilled) measured slower at every large shape
// (H200, 2026-12-03: b128 ctx4k GQA 1 0.76 of the copy against 0.84, GQA 8 0.66 against 0.87).
//
// Why: Nsight Compute on mma_bulk (2026-12-03) put 38% of its warps' stall samples on waiting for
// their own bulk copies to be accepted, 2% on the copies' data; a read-only kernel with plain loads
// reads the same pages at ~1.0 of the copy (bench/kernels/kv_read_probe.cu).
//
// Lane (g, i) of a warp loads, for a 16-position step of one page (the head's K run and V run,
// kernels/kv_fp8.h: 16 rows of 128 codes, then 16 fp32 scales):
//   K rows 8tt + g, chunks i and i + 4 (the A-operand pairs the QK products take, tt = 0, 1);
//   V rows 2i, 2i + 1, 8 + 2i, 9 + 2i, chunk g (the B operand of P·V, dims 16g..16g + 15);
//   the K and V scales of positions 8tt + 2i, 8tt + 2i + 1 (8 bytes each).
// Every load of a warp covers whole 128-byte rows. Rows past the split's end are zeroed after the
// load (the page holds other tokens' or stale bytes there, NaN codes included); their scores are
// masked as in the other kernels. Paged blocks a multiple of 16, head_dim 128 (the launcher's
// condition, as mma_bulk's).
#include <atomic>
#include <stdexcept>
#include <string>

#include "kernels/attention_decode_fp8.cuh"
#include "kernels/attention_decode_mma.cuh"
#include "kernels/common.cuh"
#include "kernels/mma_util.cuh"
#include "kernels/per_device.h"

namespace servelab::kernels::decode_fp8 {
namespace regs_detail {  // named: the kernels library may be compiled as unity batches

using decode::kThreads;
constexpr int kHd = 128;

/// One step's operands of one lane.
struct StepRegs {
  Vec8 k[2][2];     // K rows 8tt + g, chunks i, i + 4
  Vec8 v[4];        // V rows 2i, 2i + 1, 8 + 2i, 9 + 2i, chunk g
  float ks[2][2];   // K scales of positions 8tt + 2i + e
  float vs[2][2];   // V scales of the same positions
};

/// kDepth steps of loads in flight ahead of the one computed; kBps blocks an SM.
template <typename T, int kDepth, int kBps>
__global__ void __launch_bounds__(kThreads, kBps) decode_fp8_regs_kernel(const decode::Params p, const Fp8Layout f) {
  constexpr int kWarps = kThreads / 32, kG = decode::kMmaHeads;
  constexpr int kKV = kHd / 64, kKS = kHd / 16, kMT = kHd / 16, kLd = kHd + 4;
  extern __shared__ __align__(16) unsigned char tile_smem[];
  __shared__ float sm_m[kWarps][kG], sm_l[kWarps][kG];
  float* sm_o = reinterpret_cast<float*>(tile_smem);  // [kWarps * kG][kLd]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, i = lane & 3;
  const int kvh = blockIdx.x / p.n_sub, sub = blockIdx.x % p.n_sub, s = blockIdx.y, split = blockIdx.z;
  const int t_begin = split * p.split_len;
  const int ctx = p.context_lens[s];
  if (t_begin >= ctx) return;  // uniform over the block
  const int t_end = min(ctx, t_begin + p.split_len);
  const int row = p.query_start ? __ldg(p.query_start + s + 1) - 1 : s;
  const int64_t table_row = p.kv.kind == KvLayoutKind::paged ? p.kv.table_row(s) : int64_t(s);

  // Q of head g as the A operand in f16, times q_mul (its largest value in [2^13, 2^14)), dims
  // d, d + 1 | d + 2, d + 3 as the cvt's pairs.
  uint32_t qa[kKS][2];
  float q_mul = 1.0f;
  {
    const int hq = sub * kG + g;
    float qf[kKV][16];
    const T* qp = static_cast<const T*>(p.q) + row * p.q_row_stride + int64_t(kvh * p.group + hq) * kHd + i * 16;
#pragma unroll
    for (int v = 0; v < kKV; ++v) {
      float q0[8], q1[8];
      if (hq < p.group) {
        unpack8<T>(*reinterpret_cast<const Vec8*>(qp + v * 64), q0);
        unpack8<T>(*reinterpret_cast<const Vec8*>(qp + v * 64 + 8), q1);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) q0[e] = q1[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[v][e] = q0[e], qf[v][8 + e] = q1[e];
    }
    float mx = 0.0f;
#pragma unroll
    for (int v = 0; v < kKV; ++v)
#pragma unroll
      for (int e = 0; e < 16; ++e) mx = fmaxf(mx, fabsf(qf[v][e]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    int ex = 0;
    frexpf(mx, &ex);  // mx < 2^ex
    q_mul = mx > 0.0f ? ldexpf(1.0f, 14 - ex) : 1.0f;
#pragma unroll
    for (int v = 0; v < kKV; ++v)
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float* q = qf[v] + 4 * w;
        qa[v * 4 + w][0] = pack2<__half>(q[0] * q_mul, q[1] * q_mul);
        qa[v * 4 + w][1] = pack2<__half>(q[2] * q_mul, q[3] * q_mul);
      }
  }

  // This warp's steps: k-th at positions t_begin + (k·kWarps + warp)·16 + 0..15, each a whole page.
  const int n_steps = (t_end - t_begin + 15) / 16;
  const int my_steps = n_steps > warp ? (n_steps - warp + kWarps - 1) / kWarps : 0;  // uniform over the warp
  auto step_pos = [&](int k) { return t_begin + (k * kWarps + warp) * 16; };
  // Lane j holds the first slot of step w0 + j for two windows of 32 steps (the second loaded 32
  // steps before it is used), asked for k = 0, 1, 2, ... in order.
  auto first_of = [&](int k) { return k < my_steps ? int(decode::kv_slot(p, s, table_row, step_pos(k))) : 0; };
  int w0 = 0, win_a = first_of(lane), win_b = first_of(32 + lane);
  auto first_slot = [&](int k) {
    if (k >= w0 + 32) {
      win_a = win_b;
      win_b = first_of(w0 + 64 + lane);
      w0 += 32;
    }
    return __shfl_sync(0xffffffffu, win_a, min(k - w0, 31));
  };
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);
  auto load = [&](int k) {
    StepRegs r;
    const int first = first_slot(k);
    if (k >= my_steps) {  // uniform over the warp: nothing to load
#pragma unroll
      for (int tt = 0; tt < 2; ++tt) {
        r.k[tt][0] = r.k[tt][1] = Vec8{0, 0, 0, 0};
        r.ks[tt][0] = r.ks[tt][1] = r.vs[tt][0] = r.vs[tt][1] = 0.0f;
      }
#pragma unroll
      for (int rr = 0; rr < 4; ++rr) r.v[rr] = Vec8{0, 0, 0, 0};
      return r;
    }
    const int64_t at = f.codes_at(first, kvh);
    const char* kp = kbase + at;
    const char* vp = vbase + at;
#pragma unroll
    for (int tt = 0; tt < 2; ++tt)
#pragma unroll
      for (int v = 0; v < kKV; ++v) r.k[tt][v] = decode::load_kv(kp + (tt * 8 + g) * kHd + (i + 4 * v) * 16);
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) r.v[rr] = decode::load_kv(vp + ((rr >> 1) * 8 + 2 * i + (rr & 1)) * kHd + g * 16);
#pragma unroll
    for (int tt = 0; tt < 2; ++tt) {
      const float2 a = __ldg(reinterpret_cast<const float2*>(kp + 16 * kHd + (tt * 8 + 2 * i) * 4));
      const float2 b = __ldg(reinterpret_cast<const float2*>(vp + 16 * kHd + (tt * 8 + 2 * i) * 4));
      r.ks[tt][0] = a.x;
      r.ks[tt][1] = a.y;
      r.vs[tt][0] = b.x;
      r.vs[tt][1] = b.y;
    }
    return r;
  };

  float m = -1e30f, l = 0.0f;
  float acc[kMT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
  const float k_mul = p.scale_log2 / q_mul;
  float v_ref = 1.0f, v_mul = 1.0f;  // set at the warp's first step

  StepRegs ring[kDepth + 1];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) ring[d] = load(d);
  for (int k = 0; k < my_steps; ++k) {
    ring[kDepth] = load(k + kDepth);
    StepRegs& c = ring[0];
    const int t0 = step_pos(k);
    if (t0 + 16 > t_end) {  // the split's partial last step: V rows and scales past it read as zeros
      const int nv = t_end - t0;
#pragma unroll
      for (int rr = 0; rr < 4; ++rr)
        if ((rr >> 1) * 8 + 2 * i + (rr & 1) >= nv) c.v[rr] = Vec8{0, 0, 0, 0};
#pragma unroll
      for (int tt = 0; tt < 2; ++tt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (tt * 8 + 2 * i + e >= nv) c.vs[tt][e] = 0.0f;
    }

    // S = Q·Kᵀ: sc[tt][0..1] = head g × positions 8tt + 2i, 8tt + 2i + 1 (c2, c3: the zero rows).
    float sc[2][4];
#pragma unroll
    for (int tt = 0; tt < 2; ++tt) {
      sc[tt][0] = sc[tt][1] = sc[tt][2] = sc[tt][3] = 0.0f;
#pragma unroll
      for (int v = 0; v < kKV; ++v)
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const uint32_t wd = decode::word(c.k[tt][v], w);
          mma_16816<__half>(sc[tt], qa[v * 4 + w][0], 0u, qa[v * 4 + w][1], 0u, e4m3x2_f16x2<false>(wd), e4m3x2_f16x2<true>(wd));
        }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int tt = 0; tt < 2; ++tt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int t = tt * 8 + 2 * i + e;
        const float x = t0 + t < t_end ? sc[tt][e] * (c.ks[tt][e] * k_mul) : -INFINITY;
        sc[tt][e] = x;
        mx = fmaxf(mx, x);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
    if (__any_sync(0xffffffffu, m_new > m)) {  // a new running max somewhere: rescale (else every factor is 1)
      const float corr = exp2f(m - m_new);
      m = m_new;
      l *= corr;
      const float corr_a = __shfl_sync(0xffffffffu, corr, 8 * i), corr_b = __shfl_sync(0xffffffffu, corr, 8 * i + 4);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        acc[mt][0] *= corr_a;
        acc[mt][2] *= corr_a;
        acc[mt][1] *= corr_b;
        acc[mt][3] *= corr_b;
      }
    }
    if (k == 0) {  // the largest V scale of this warp's first step (positions past the split: 0)
      float r = fmaxf(fmaxf(c.vs[0][0], c.vs[0][1]), fmaxf(c.vs[1][0], c.vs[1][1]));
      r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, 1));
      r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, 2));
      v_ref = r > 0.0f ? r : 1.0f;
      v_mul = 1.0f / v_ref;
    }
    float pv[2][2];
#pragma unroll
    for (int tt = 0; tt < 2; ++tt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pr = exp2f(sc[tt][e] - m);
        l += pr;
        pv[tt][e] = fminf(pr * (c.vs[tt][e] * v_mul), 65504.0f);
      }
    const uint32_t b0 = pack2<__half>(pv[0][0], pv[0][1]), b1 = pack2<__half>(pv[1][0], pv[1][1]);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      // A dim's bytes of positions (2i, 2i + 1) next to each other for the cvt.
      const uint32_t sel = (mt & 1) ? 0x7362u : 0x5140u;
      const uint32_t y01 = __byte_perm(decode::word(c.v[0], mt / 2), decode::word(c.v[1], mt / 2), sel);
      const uint32_t y23 = __byte_perm(decode::word(c.v[2], mt / 2), decode::word(c.v[3], mt / 2), sel);
      mma_16816<__half>(acc[mt], e4m3x2_f16x2<false>(y01), e4m3x2_f16x2<true>(y01), e4m3x2_f16x2<false>(y23),
                        e4m3x2_f16x2<true>(y23), b0, b1);
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) ring[d] = ring[d + 1];
  }

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (i == 0) {
    sm_m[warp][g] = m;
    sm_l[warp][g] = l;
  }
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int d = g * (kHd / 8) + 2 * mt;
    *reinterpret_cast<float2*>(&sm_o[(warp * kG + 2 * i) * kLd + d]) = make_float2(acc[mt][0] * v_ref, acc[mt][2] * v_ref);
    *reinterpret_cast<float2*>(&sm_o[(warp * kG + 2 * i + 1) * kLd + d]) = make_float2(acc[mt][1] * v_ref, acc[mt][3] * v_ref);
  }
  __syncthreads();
  decode::finish_block<T, kHd, kG, kWarps, kLd>(p, sm_m, sm_l, sm_o, s, row, kvh, sub, split, ctx);
}

template <typename T, int kDepth, int kBps>
void launch(const decode::Params& p, const Fp8Layout& f, dim3 grid, cudaStream_t stream) {
  constexpr int bytes = (kThreads / 32) * decode::kMmaHeads * (kHd + 4) * 4;
  static std::atomic<uint64_t> raised{0};
  once_per_device(raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(decode_fp8_regs_kernel<T, kDepth, kBps>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  });
  decode_fp8_regs_kernel<T, kDepth, kBps><<<grid, kThreads, bytes, stream>>>(p, f);
  CUDA_CHECK_LAUNCH();
}

}  // namespace regs_detail

void launch_decode_fp8_regs(ScalarType dtype, int head_dim, const decode::Params& p, const Fp8Layout& f, dim3 grid,
                            cudaStream_t stream) {
  using namespace regs_detail;
  if (head_dim != kHd) throw std::invalid_argument("decode_attention_fp8: register loads are built for head_dim 128");
  SERVELAB_DISPATCH_16(dtype, (launch<__nv_bfloat16, 2, 2>(p, f, grid, stream)), (launch<__half, 2, 2>(p, f, grid, stream)));
}

}  // namespace servelab::kernels::decode_fp8
