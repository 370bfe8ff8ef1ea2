// Decode attention over an FP8 KV arena (kv_fp8.h) on tensor cores: attention_decode_mma.cuh's
// structure (a block owns one KV head of one sequence over one split, up to 8 query heads as rows
// 0-7 of the m16 tile; each of the 4 warps takes 16-position steps, kS a pass, loaded straight
// from the cache into mma.sync fragments), fed E4M3 codes that become bf16 in registers:
//   S = Q·Kᵀ    m16n8k16 bf16, A = Q · 2^60 (heads × dims), B = Kᵀ codes (dims × 8 positions);
//   Oᵀ += Vᵀ·P'ᵀ m16n8k16 bf16, A = Vᵀ codes (16 dims × 16 positions), B = P' = P · v_scale · 2^90.
// Conversion: a code's sign and its 7 magnitude bits moved into a bf16 (sign at 15, magnitude at
// 10..4) are exactly its value · 2^-120 (bf16's exponent bias is 127, E4M3's 7; subnormal codes
// land on bf16 subnormals), 1.75 integer instructions a code (two shifts and a mask-merge a pair).
// The per-(token, head) K scale multiplies the position's score after Q·Kᵀ (q · (s k) = s (q · k)),
// the V scale its softmax weight before P'·V; the 2^-120 of each code is paid back by 2^60 on Q
// and 2^60 on the scores (K), and 2^90 on P' and 2^30 on the output (V): no factor overflows for
// row scales below 2^38 (amax ~1e14), and no product underflows above a score of 2^-66.
//
// Lane (g, i) = (lane / 4, lane % 4) loads:
//   K rows of positions g and 8 + g of a step: HD / 64 16-byte vectors at bytes i·16 + v·64, so
//     k-step j = 4v + w uses word w (codes 4w..4w+3, dims d = v·64 + i·16 + 4w + 0..3): b0 = the
//     codes 0, 2 (k rows 2i, 2i+1 = dims d, d+2), b1 = codes 1, 3; Q packed the same way;
//   V rows of positions 2i, 2i+1, 8+2i, 9+2i of a step (the positions of its score accumulators,
//     so their scales are the lane's own loads too): HD / 8 codes at byte g·HD/8; m-tile mt pairs
//     the two positions' codes 2mt, 2mt+1 (rows g / g + 8 of the tile) by one byte permute.
// Each lane loads the K and V scales of its four score positions (8 lanes share each address).
// The online softmax, the head-column rescaling, the split merge (workspace, last block) and the
// output are the bf16 tensor-core kernel's. fp32 accumulation; P' rounded to bf16 for P'·V (and
// with fp16 storage, Q rounded to bf16).
#include <stdexcept>
#include <string>

#include "kernels/attention_decode_fp8.cuh"
#include "kernels/attention_decode_mma.cuh"
#include "kernels/common.cuh"
#include "kernels/mma_util.cuh"

namespace servelab::kernels::decode_fp8 {
namespace mma_detail {  // named: the kernels library may be compiled as unity batches

using decode::kThreads;
using bf16 = __nv_bfloat16;
constexpr float kTwoPow60 = 1152921504606846976.0f;            // 2^60, exact
constexpr float kTwoPow90 = 1237940039285380274899124224.0f;   // 2^90, exact
constexpr float kTwoPow30 = 1073741824.0f;                     // 2^30

__device__ __forceinline__ uint2 load_codes8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ float load_scale(const void* p) {
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

template <typename T, int HD, int kS>
__global__ void __launch_bounds__(kThreads, 2) decode_fp8_mma_kernel(const decode::Params p, const Fp8Layout f) {
  static_assert(HD == 64 || HD == 128, "tensor-core FP8 decode needs head_dim 64 or 128");
  static_assert(kS % 2 == 0, "slot lookups hold two steps a lane");
  constexpr int kWarps = kThreads / 32, kG = decode::kMmaHeads;
  constexpr int kKV = HD / 64;  // 16-byte K code vectors per row per lane
  constexpr int kVW = HD / 32;  // V code words per row per lane (HD / 8 codes)
  constexpr int kKS = HD / 16;  // k-steps of Q·Kᵀ
  constexpr int kMT = HD / 16;  // m-tiles of Oᵀ
  constexpr int kPass = kWarps * kS * 16;
  constexpr int kLd = HD + 4;   // padded rows (as the bf16 kernel)
  __shared__ float sm_m[kWarps][kG], sm_l[kWarps][kG];
  __shared__ __align__(16) float sm_o[kWarps * kG * kLd];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, i = lane & 3;
  const int kvh = blockIdx.x / p.n_sub, sub = blockIdx.x % p.n_sub, s = blockIdx.y, split = blockIdx.z;
  const int t_begin = split * p.split_len;
  const int ctx = p.context_lens[s];
  if (t_begin >= ctx) return;  // uniform over the block
  const int t_end = min(ctx, t_begin + p.split_len);
  const int row = p.query_start ? __ldg(p.query_start + s + 1) - 1 : s;
  const int64_t table_row = p.kv.kind == KvLayoutKind::paged ? p.kv.table_row(s) : int64_t(s);

  // Q of head g as the A operand (row g; rows g + 8 are zero), times 2^60, in bf16.
  uint32_t qa[kKS][2];
  {
    const int hq = sub * kG + g;
    const T* qp = static_cast<const T*>(p.q) + row * p.q_row_stride + int64_t(kvh * p.group + hq) * HD + i * 16;
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
      for (int w = 0; w < 4; ++w) {
        const float* q = w < 2 ? q0 + 4 * w : q1 + 4 * (w - 2);
        qa[v * 4 + w][0] = pack2<bf16>(q[0] * kTwoPow60, q[2] * kTwoPow60);
        qa[v * 4 + w][1] = pack2<bf16>(q[1] * kTwoPow60, q[3] * kTwoPow60);
      }
    }
  }

  // Position t (0..15) of step u of the pass at `base`; lane l looks up the slots of steps 2q +
  // l / 16, position l % 16 (sl[q]), and a step's rows take theirs by shuffles.
  auto pos = [&](int base, int u, int t) { return base + (u * kWarps + warp) * 16 + t; };
  int sl[kS / 2];
  auto lookup = [&](int base) {
#pragma unroll
    for (int q = 0; q < kS / 2; ++q) {
      const int t = pos(base, 2 * q + (lane >> 4), lane & 15);
      sl[q] = t < t_end ? int(decode::kv_slot(p, s, table_row, t)) : 0;
    }
  };
  lookup(t_begin);

  float m = -1e30f, l = 0.0f;  // head g: running max (log2 units; same in a quad), this lane's sum
  float acc[kMT][4];           // Oᵀ: [m-tile][c0..c3] = dims (rows g | g + 8) × heads 2i, 2i + 1
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);
  const float k_mul = p.scale_log2 * kTwoPow60;

  for (int base = t_begin; base < t_end; base += kPass) {  // uniform trip count: shuffles are safe
    Vec8 kr[kS][2][kKV];
    uint32_t vr[kS][4][kVW];
    float ksc[kS][4], vsc[kS][4];
#pragma unroll
    for (int u = 0; u < kS; ++u) {
#pragma unroll
      for (int tt = 0; tt < 2; ++tt) {  // K rows: positions g and 8 + g of the step
        const int src = tt * 8 + g;
        const int slot = __shfl_sync(0xffffffffu, sl[u >> 1], (u & 1) * 16 + src);
        const bool ok = pos(base, u, src) < t_end;
        const char* kp = kbase + f.codes_at(slot, kvh) + i * 16;
#pragma unroll
        for (int v = 0; v < kKV; ++v) kr[u][tt][v] = ok ? decode::load_kv(kp + v * 64) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {  // V rows and both scales: positions 2i, 2i+1, 8+2i, 9+2i
        const int src = (r >> 1) * 8 + 2 * i + (r & 1);
        const int slot = __shfl_sync(0xffffffffu, sl[u >> 1], (u & 1) * 16 + src);
        const bool ok = pos(base, u, src) < t_end;
        const int64_t at = f.codes_at(slot, kvh), sat = f.scale_at(slot, kvh);
        if constexpr (HD == 128) {
          const Vec8 x = ok ? decode::load_kv(vbase + at + g * 16) : make_uint4(0, 0, 0, 0);
          vr[u][r][0] = x.x;
          vr[u][r][1] = x.y;
          vr[u][r][2] = x.z;
          vr[u][r][3] = x.w;
        } else {
          const uint2 x = ok ? load_codes8(vbase + at + g * 8) : make_uint2(0, 0);
          vr[u][r][0] = x.x;
          vr[u][r][1] = x.y;
        }
        ksc[u][r] = ok ? load_scale(kbase + sat) : 0.0f;
        vsc[u][r] = ok ? load_scale(vbase + sat) : 0.0f;
      }
    }
    lookup(base + kPass);  // the next pass's slots while this pass's loads are in flight
    // S = Q·Kᵀ: sc[u][tt][0..1] = head g × positions 2i, 2i+1 of tile tt (c2, c3: the zero rows).
    float sc[kS][2][4];
#pragma unroll
    for (int u = 0; u < kS; ++u)
#pragma unroll
      for (int tt = 0; tt < 2; ++tt) {
        sc[u][tt][0] = sc[u][tt][1] = sc[u][tt][2] = sc[u][tt][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < kKS; ++j) {
          const uint32_t w = decode::word(kr[u][tt][j / 4], j % 4);
          mma_16816<bf16>(sc[u][tt], qa[j][0], 0u, qa[j][1], 0u, e4m3_lo_pair(w), e4m3_hi_pair(w));
        }
      }
    float mx = -INFINITY;
#pragma unroll
    for (int u = 0; u < kS; ++u)
#pragma unroll
      for (int tt = 0; tt < 2; ++tt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const bool ok = pos(base, u, tt * 8 + 2 * i + e) < t_end;
          const float x = ok ? sc[u][tt][e] * (ksc[u][tt * 2 + e] * k_mul) : -INFINITY;
          sc[u][tt][e] = x;
          mx = fmaxf(mx, x);
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
    const float corr = exp2f(m - m_new);
    m = m_new;
    l *= corr;
    // Oᵀ columns are heads 2i and 2i + 1: their factors live in lanes (2i) * 4 and (2i + 1) * 4.
    const float corr_a = __shfl_sync(0xffffffffu, corr, 8 * i), corr_b = __shfl_sync(0xffffffffu, corr, 8 * i + 4);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      acc[mt][0] *= corr_a;
      acc[mt][2] *= corr_a;
      acc[mt][1] *= corr_b;
      acc[mt][3] *= corr_b;
    }
#pragma unroll
    for (int u = 0; u < kS; ++u) {
      float pv[2][2];
#pragma unroll
      for (int tt = 0; tt < 2; ++tt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pr = exp2f(sc[u][tt][e] - m);
          l += pr;
          pv[tt][e] = pr * (vsc[u][tt * 2 + e] * kTwoPow90);
        }
      const uint32_t b0 = pack2<bf16>(pv[0][0], pv[0][1]), b1 = pack2<bf16>(pv[1][0], pv[1][1]);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        // Codes 2mt, 2mt + 1 of the positions 2i, 2i+1 (rows 0, 1) and 8+2i, 9+2i (rows 2, 3).
        const uint32_t sel = (mt & 1) ? 0x7632u : 0x5410u;
        const uint32_t y01 = __byte_perm(vr[u][0][mt / 2], vr[u][1][mt / 2], sel);
        const uint32_t y23 = __byte_perm(vr[u][2][mt / 2], vr[u][3][mt / 2], sel);
        mma_16816<bf16>(acc[mt], e4m3_lo_pair(y01), e4m3_hi_pair(y01), e4m3_lo_pair(y23), e4m3_hi_pair(y23), b0, b1);
      }
    }
  }

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (i == 0) {
    sm_m[warp][g] = m;
    sm_l[warp][g] = l;
  }
  // acc[mt][0 | 2] = head 2i at dims d, d + 1 with d = g·HD/8 + 2mt; [1 | 3] = head 2i + 1.
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int d = g * (HD / 8) + 2 * mt;
    *reinterpret_cast<float2*>(&sm_o[(warp * kG + 2 * i) * kLd + d]) = make_float2(acc[mt][0] * kTwoPow30, acc[mt][2] * kTwoPow30);
    *reinterpret_cast<float2*>(&sm_o[(warp * kG + 2 * i + 1) * kLd + d]) =
        make_float2(acc[mt][1] * kTwoPow30, acc[mt][3] * kTwoPow30);
  }
  __syncthreads();
  decode::finish_block<T, HD, kG, kWarps, kLd>(p, sm_m, sm_l, sm_o, s, row, kvh, sub, split, ctx);
}

template <typename T, int HD>
void launch_steps(int steps, const decode::Params& p, const Fp8Layout& f, dim3 grid, cudaStream_t stream) {
  if (steps == kMmaStepsWide) decode_fp8_mma_kernel<T, HD, kMmaStepsWide><<<grid, kThreads, 0, stream>>>(p, f);
  else if (steps == kMmaStepsNarrow) decode_fp8_mma_kernel<T, HD, kMmaStepsNarrow><<<grid, kThreads, 0, stream>>>(p, f);
  else throw std::invalid_argument("decode_attention_fp8: tensor-core steps " + std::to_string(steps) + " not built (2, 4)");
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_hd(int hd, int steps, const decode::Params& p, const Fp8Layout& f, dim3 grid, cudaStream_t stream) {
  if (hd == 64) return launch_steps<T, 64>(steps, p, f, grid, stream);
  if (hd == 128) return launch_steps<T, 128>(steps, p, f, grid, stream);
  throw std::invalid_argument("decode_attention_fp8: tensor cores need head_dim 64 or 128 (got " + std::to_string(hd) + ")");
}

}  // namespace mma_detail

void launch_decode_fp8_mma(ScalarType dtype, int head_dim, int steps, const decode::Params& p, const Fp8Layout& f,
                           dim3 grid, cudaStream_t stream) {
  using namespace mma_detail;
  SERVELAB_DISPATCH_16(dtype, (launch_hd<__nv_bfloat16>(head_dim, steps, p, f, grid, stream)),
                       (launch_hd<__half>(head_dim, steps, p, f, grid, stream)));
}

}  // namespace servelab::kernels::decode_fp8
