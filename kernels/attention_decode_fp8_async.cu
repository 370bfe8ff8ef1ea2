// Decode attention over an FP8 KV arena on tensor cores with the codes staged through shared
// memory (Fp8KvDecode::mma_async): attention_decode_fp8_mma.cu's arithmetic, fragments and
// scaling (see there), but each warp copies its next pass's K/V codes and scales into its own
// shared-memory stage by cp.async while it computes the current one from the other stage, so
// loads stay in flight through the conversion, the products and the softmax (the register kernel
// loads a pass, then computes it). Two stages of kSteps 16-position steps a warp; no block barrier
// in the loop (a warp reads only what it copied: cp.async.wait_group, then __syncwarp).
//
// Stage layout (per warp): K rows [kSteps·16][kKStride] bytes, V rows [kSteps·16][kVStride], then
// the rows' K scales and V scales (fp32). The strides keep the fragment reads conflict-free: a K
// read (lane (g, i) at row g, bytes i·16 + v·64) puts rows g and g + 1 in opposite bank halves
// (head_dim 128: 192-byte rows; 64: 64-byte rows); a V read (rows 2i.., bytes g·HD/8) puts rows
// 2i on distinct bank quarters (HD + 16-byte rows). The copies: 16-byte cp.async.cg chunks, a
// row's HD/16 chunks by consecutive lanes (coalesced), the scales by 4-byte cp.async.ca.
#include <atomic>
#include <stdexcept>
#include <string>

#include "kernels/attention_decode_fp8.cuh"
#include "kernels/attention_decode_mma.cuh"
#include "kernels/common.cuh"
#include "kernels/mma_util.cuh"
#include "kernels/per_device.h"

namespace servelab::kernels::decode_fp8 {
namespace async_detail {  // named: the kernels library may be compiled as unity batches

using decode::kThreads;
using bf16 = __nv_bfloat16;
constexpr float kTwoPow60 = 1152921504606846976.0f;           // 2^60, exact
constexpr float kTwoPow90 = 1237940039285380274899124224.0f;  // 2^90, exact
constexpr float kTwoPow30 = 1073741824.0f;                    // 2^30
constexpr int kSteps = 2;   // 16-position steps per warp per stage
constexpr int kStages = 2;  // stages per warp: one computed while the other loads

template <int HD>
struct Stage {
  static constexpr int kRows = kSteps * 16;
  static constexpr int kKStride = HD == 128 ? HD + 64 : HD;
  static constexpr int kVStride = HD + 16;
  static constexpr int kKBytes = kRows * kKStride, kVBytes = kRows * kVStride;
  static constexpr int kBytes = kKBytes + kVBytes + kRows * 8;
  static constexpr int kWarpBytes = kStages * kBytes;
  static constexpr int kBlockBytes = (kThreads / 32) * kWarpBytes;
  static_assert(kBytes % 16 == 0, "16-byte aligned stages");
};

__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads, 2) decode_fp8_async_kernel(const decode::Params p, const Fp8Layout f) {
  using S = Stage<HD>;
  constexpr int kWarps = kThreads / 32, kG = decode::kMmaHeads;
  constexpr int kKV = HD / 64, kKS = HD / 16, kMT = HD / 16;
  constexpr int kChunks = HD / 16;  // 16-byte chunks of a row of codes
  constexpr int kPass = kWarps * kSteps * 16;
  constexpr int kLd = HD + 4;
  extern __shared__ __align__(16) unsigned char stage_smem[];
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

  // Q of head g as the A operand, times 2^60, in bf16 (attention_decode_fp8_mma.cu's packing).
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

  auto pos = [&](int base, int u, int t) { return base + (u * kWarps + warp) * 16 + t; };
  int sl[kSteps / 2];  // lane l: slot of step 2q + l / 16, position l % 16 of the pass
  auto lookup = [&](int base) {
#pragma unroll
    for (int q = 0; q < kSteps / 2; ++q) {
      const int t = pos(base, 2 * q + (lane >> 4), lane & 15);
      sl[q] = t < t_end ? int(decode::kv_slot(p, s, table_row, t)) : 0;
    }
  };
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);
  const int64_t code_col = int64_t(kvh) * HD, scale_col = f.scales_at + 4 * int64_t(kvh);
  unsigned char* wbase = stage_smem + warp * S::kWarpBytes;
  const uint32_t wsm = smem_u32(wbase);
  // The cp.asyncs of the pass at `base` into stage st (slots in sl; rows past the split zero-filled).
  auto issue = [&](int base, int st) {
    const uint32_t s0 = wsm + st * S::kBytes;
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
#pragma unroll
      for (int j = 0; j < 16 * kChunks / 32; ++j) {
        const int c = lane + 32 * j, r = c / kChunks, ch = c % kChunks;
        const int slot = __shfl_sync(0xffffffffu, sl[u >> 1], (u & 1) * 16 + r);
        const bool ok = pos(base, u, r) < t_end;
        const int64_t at = int64_t(slot) * f.slot_bytes + code_col + ch * 16;
        cp_async16(s0 + (u * 16 + r) * S::kKStride + ch * 16, kbase + at, ok);
        cp_async16(s0 + S::kKBytes + (u * 16 + r) * S::kVStride + ch * 16, vbase + at, ok);
      }
      const int r = lane & 15;
      const int slot = __shfl_sync(0xffffffffu, sl[u >> 1], (u & 1) * 16 + r);
      const bool ok = pos(base, u, r) < t_end;
      cp_async4(s0 + S::kKBytes + S::kVBytes + ((lane >> 4) * S::kRows + u * 16 + r) * 4,
                (lane < 16 ? kbase : vbase) + int64_t(slot) * f.slot_bytes + scale_col, ok);
    }
  };

  float m = -1e30f, l = 0.0f;
  float acc[kMT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.0f;
  const float k_mul = p.scale_log2 * kTwoPow60;

  lookup(t_begin);
  issue(t_begin, 0);
  cp_async_commit();
  lookup(t_begin + kPass);
  int st = 0;
  for (int base = t_begin; base < t_end; base += kPass) {  // uniform trip count: shuffles are safe
    const int nb = base + kPass;
    if (nb < t_end) issue(nb, st ^ 1);  // into the stage the previous pass read (a __syncwarp ago)
    cp_async_commit();
    lookup(nb + kPass);
    cp_async_wait<1>();  // this lane's copies of this pass have landed
    __syncwarp();        // and every lane's
    const unsigned char* sb = wbase + st * S::kBytes;
    const float* ksc = reinterpret_cast<const float*>(sb + S::kKBytes + S::kVBytes);
    const float* vsc = ksc + S::kRows;

    float sc[kSteps][2][4];
#pragma unroll
    for (int u = 0; u < kSteps; ++u)
#pragma unroll
      for (int tt = 0; tt < 2; ++tt) {
        sc[u][tt][0] = sc[u][tt][1] = sc[u][tt][2] = sc[u][tt][3] = 0.0f;
        const unsigned char* kp = sb + (u * 16 + tt * 8 + g) * S::kKStride + i * 16;
#pragma unroll
        for (int v = 0; v < kKV; ++v) {
          const Vec8 x = *reinterpret_cast<const Vec8*>(kp + v * 64);
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            const uint32_t wd = decode::word(x, w);
            mma_16816<bf16>(sc[u][tt], qa[v * 4 + w][0], 0u, qa[v * 4 + w][1], 0u, e4m3_lo_pair(wd), e4m3_hi_pair(wd));
          }
        }
      }
    float mx = -INFINITY;
#pragma unroll
    for (int u = 0; u < kSteps; ++u)
#pragma unroll
      for (int tt = 0; tt < 2; ++tt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int t = u * 16 + tt * 8 + 2 * i + e;
          const bool ok = pos(base, u, tt * 8 + 2 * i + e) < t_end;
          const float x = ok ? sc[u][tt][e] * (ksc[t] * k_mul) : -INFINITY;
          sc[u][tt][e] = x;
          mx = fmaxf(mx, x);
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
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
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      float pv[2][2];
#pragma unroll
      for (int tt = 0; tt < 2; ++tt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pr = exp2f(sc[u][tt][e] - m);
          l += pr;
          pv[tt][e] = pr * (vsc[u * 16 + tt * 8 + 2 * i + e] * kTwoPow90);
        }
      const uint32_t b0 = pack2<bf16>(pv[0][0], pv[0][1]), b1 = pack2<bf16>(pv[1][0], pv[1][1]);
      // This lane's HD/8 codes of the V rows of positions 2i, 2i+1, 8+2i, 9+2i.
      uint32_t vr[4][HD / 32];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const unsigned char* vp = sb + S::kKBytes + (u * 16 + (r >> 1) * 8 + 2 * i + (r & 1)) * S::kVStride + g * (HD / 8);
        if constexpr (HD == 128) {
          const Vec8 x = *reinterpret_cast<const Vec8*>(vp);
          vr[r][0] = x.x;
          vr[r][1] = x.y;
          vr[r][2] = x.z;
          vr[r][3] = x.w;
        } else {
          const uint2 x = *reinterpret_cast<const uint2*>(vp);
          vr[r][0] = x.x;
          vr[r][1] = x.y;
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const uint32_t sel = (mt & 1) ? 0x7632u : 0x5410u;
        const uint32_t y01 = __byte_perm(vr[0][mt / 2], vr[1][mt / 2], sel);
        const uint32_t y23 = __byte_perm(vr[2][mt / 2], vr[3][mt / 2], sel);
        mma_16816<bf16>(acc[mt], e4m3_lo_pair(y01), e4m3_hi_pair(y01), e4m3_lo_pair(y23), e4m3_hi_pair(y23), b0, b1);
      }
    }
    __syncwarp();  // every lane is done with this stage before the next pass refills it
    st ^= 1;
  }
  cp_async_wait<0>();

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (i == 0) {
    sm_m[warp][g] = m;
    sm_l[warp][g] = l;
  }
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
void launch(const decode::Params& p, const Fp8Layout& f, dim3 grid, cudaStream_t stream) {
  constexpr int bytes = Stage<HD>::kBlockBytes;
  static std::atomic<uint64_t> raised{0};
  once_per_device(raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(decode_fp8_async_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  });
  decode_fp8_async_kernel<T, HD><<<grid, kThreads, bytes, stream>>>(p, f);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_hd(int hd, const decode::Params& p, const Fp8Layout& f, dim3 grid, cudaStream_t stream) {
  if (hd == 64) return launch<T, 64>(p, f, grid, stream);
  if (hd == 128) return launch<T, 128>(p, f, grid, stream);
  throw std::invalid_argument("decode_attention_fp8: tensor cores need head_dim 64 or 128 (got " + std::to_string(hd) + ")");
}

}  // namespace async_detail

void launch_decode_fp8_async(ScalarType dtype, int head_dim, const decode::Params& p, const Fp8Layout& f, dim3 grid,
                             cudaStream_t stream) {
  using namespace async_detail;
  SERVELAB_DISPATCH_16(dtype, (launch_hd<__nv_bfloat16>(head_dim, p, f, grid, stream)),
                       (launch_hd<__half>(head_dim, p, f, grid, stream)));
}

}  // namespace servelab::kernels::decode_fp8
