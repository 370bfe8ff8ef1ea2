// Decode attention over an FP8 KV arena (kv_fp8.h): attention_decode.cu's CUDA-core kernel with
// the K/V loads dequantized in registers. A lane group of HD / 8 threads holds one position's K
// (and V) row, 8 codes (8 bytes) a thread, plus the row's two fp32 scales (one load each, the
// same address across the group); the block walks kThreads / (HD / 8) positions at once, kU deep,
// loading all kU rows before using any. Up to G query heads of one KV head a block (GQA buckets 1,
// 4, 8 as the bf16 kernel), so the codes are read once per KV head. The split cut, the workspace
// and the merge are decode_attention's (attention_decode_common.cuh).
//
// Dequantization: an E4M3 byte b becomes the fp32 whose bits are (b & 0x80) << 24 | (b & 0x7f) << 20,
// which is exactly value(b) * 2^-120 (subnormal codes land on fp32 subnormals, exact without
// flush-to-zero); the 2^120 is paid back as 2^60 on q and 2^60 on the K scale for the scores, and
// 2^60 on the V scale and 2^60 on the output sums (split so that no factor overflows for row
// amaxes up to ~1e20). The K scale multiplies the row's score after the dot product
// (q · (s k) = s (q · k)), the V scale the row's softmax weight, so the per-element work is the
// bit move and the two FMAs.
//
// decode_attention_fp8 picks this kernel or the tensor-core one (attention_decode_fp8_mma.cu;
// Fp8KvDecode, resolve_fp8_kv_decode) and builds the launch parameters for either.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/attention_decode_common.cuh"
#include "kernels/attention_decode_fp8.cuh"
#include "kernels/attention_decode_mma.cuh"
#include "kernels/common.cuh"
#include "kernels/kv_fp8.h"

namespace servelab::kernels {
namespace decode_fp8_detail {  // named: the kernels library may be compiled as unity batches

using decode::kThreads;
using decode_fp8::Fp8Layout;
constexpr float kTwoPow60 = 1152921504606846976.0f;  // 2^60, exact

/// 8-byte read-only load of 8 codes, no L1 allocation, L2::256B prefetch hint (a row of 128 codes
/// and the next row's start).
__device__ __forceinline__ uint2 load_codes(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ float load_scale(const void* p) {
  float v;
  asm volatile("ld.global.nc.L1::no_allocate.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

/// 4 codes of a word as value * 2^-120 each (see the file comment).
__device__ __forceinline__ void e4m3x4_scaled(uint32_t w, float* f) {
  f[0] = __uint_as_float(((w & 0x7fu) << 20) | ((w & 0x80u) << 24));
  f[1] = __uint_as_float(((w & 0x7f00u) << 12) | ((w & 0x8000u) << 16));
  f[2] = __uint_as_float(((w & 0x7f0000u) << 4) | ((w & 0x800000u) << 8));
  f[3] = __uint_as_float(((w & 0x7f000000u) >> 4) | (w & 0x80000000u));
}
/// The same bits by byte permutes: byte k moved to the top of a word (prmt; byte 3 is there
/// already), an arithmetic shift right by 4 puts its magnitude bits at 26..20 and copies of its
/// sign at 31..27, and one mask keeps bit 31 and 26..0: 2.75 integer instructions a code against
/// e4m3x4_scaled's 4 (two shifts and two logic operations), on the integer pipe that bounds
/// the kernel at GQA 1.
__device__ __forceinline__ void e4m3x4_scaled_prmt(uint32_t w, float* f) {
  f[0] = __uint_as_float(uint32_t(int32_t(__byte_perm(w, 0, 0x0444)) >> 4) & 0x87ffffffu);
  f[1] = __uint_as_float(uint32_t(int32_t(__byte_perm(w, 0, 0x1444)) >> 4) & 0x87ffffffu);
  f[2] = __uint_as_float(uint32_t(int32_t(__byte_perm(w, 0, 0x2444)) >> 4) & 0x87ffffffu);
  f[3] = __uint_as_float(uint32_t(int32_t(w & 0xff000000u) >> 4) & 0x87ffffffu);
}
template <bool kPrmt>
__device__ __forceinline__ void e4m3x8_scaled(uint2 v, float (&f)[8]) {
  if constexpr (kPrmt) {
    e4m3x4_scaled_prmt(v.x, f);
    e4m3x4_scaled_prmt(v.y, f + 4);
  } else {
    e4m3x4_scaled(v.x, f);
    e4m3x4_scaled(v.y, f + 4);
  }
}

template <typename T, int HD, int G, bool kPrmt>
__global__ void __launch_bounds__(kThreads, G == 1 ? 7 : G <= 4 ? 4 : 2)
    decode_fp8_kernel(const decode::Params p, const Fp8Layout f) {
  constexpr int kTpt = HD / 8;           // threads per position (8 codes each)
  constexpr int kLg = kThreads / kTpt;   // positions per pass
  constexpr int kU = G >= 8 ? 2 : 4;     // passes loaded before use
  __shared__ float sm_m[kLg][G], sm_l[kLg][G];
  __shared__ __align__(16) float sm_o[kLg][G][HD];

  const int kvh = blockIdx.x / p.n_sub, sub = blockIdx.x % p.n_sub, s = blockIdx.y, split = blockIdx.z;
  const int ctx = p.context_lens[s];
  const int t_begin = split * p.split_len;
  if (t_begin >= ctx) return;  // uniform over the block
  const int t_end = min(ctx, t_begin + p.split_len);
  const int lg = threadIdx.x / kTpt, c = threadIdx.x % kTpt;
  const int row = p.query_start ? p.query_start[s + 1] - 1 : s;
  const int64_t table_row = p.kv.kind == KvLayoutKind::paged ? p.kv.table_row(s) : int64_t(s);

  float qf[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int h = sub * G + g;
    if (h < p.group) {
      const T* qp = static_cast<const T*>(p.q) + row * p.q_row_stride + int64_t(kvh * p.group + h) * HD + c * 8;
      unpack8<T>(*reinterpret_cast<const Vec8*>(qp), qf[g]);
#pragma unroll
      for (int j = 0; j < 8; ++j) qf[g][j] *= p.scale_log2 * kTwoPow60;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) qf[g][j] = 0.0f;
    }
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -1e30f;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.0f;
  }
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);
  const int col = c * 8;  // this lane's codes within a row

  int64_t slot[kU];
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int t = t_begin + u * kLg + lg;
    slot[u] = t < t_end ? decode::kv_slot(p, s, table_row, t) : 0;
  }
  for (int base = t_begin; base < t_end; base += kLg * kU) {  // uniform trip count: shuffles are safe
    uint2 ck[kU], cv[kU];
    float sk[kU], sv[kU];
    bool ok[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = base + u * kLg + lg;
      ok[u] = t < t_end;
      if (ok[u]) {
        const int64_t at = f.codes_at(slot[u], kvh) + col, sat = f.scale_at(slot[u], kvh);
        ck[u] = load_codes(kbase + at);
        cv[u] = load_codes(vbase + at);
        sk[u] = load_scale(kbase + sat);
        sv[u] = load_scale(vbase + sat);
      } else {
        ck[u] = cv[u] = make_uint2(0, 0);
        sk[u] = sv[u] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = base + kLg * kU + u * kLg + lg;
      slot[u] = t < t_end ? decode::kv_slot(p, s, table_row, t) : 0;
    }
    float sc[kU][G];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float kf[8];
      e4m3x8_scaled<kPrmt>(ck[u], kf);
      const float ks = sk[u] * kTwoPow60;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) d = fmaf(qf[g][j], kf[j], d);
#pragma unroll
        for (int o = kTpt / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        sc[u][g] = ok[u] ? d * ks : -INFINITY;
      }
    }
    // The online softmax pass (decode::online_softmax_pass with the V scale on the weight).
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = sc[0][g];
#pragma unroll
      for (int u = 1; u < kU; ++u) mx = fmaxf(mx, sc[u][g]);
      const float m_new = fmaxf(m[g], mx);
      const float corr = exp2f(m[g] - m_new);
      m[g] = m_new;
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= corr;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float vf[8];
      e4m3x8_scaled<kPrmt>(cv[u], vf);
      const float vs = sv[u] * kTwoPow60;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pr = exp2f(sc[u][g] - m[g]);
        l[g] += pr;
        const float w = pr * vs;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(w, vf[e], acc[g][e]);
      }
    }
  }

#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] *= kTwoPow60;
  decode::store_lane_group<kLg, G, HD>(sm_m, sm_l, sm_o, lg, c, m, l, acc);
  __syncthreads();
  decode::finish_block<T, HD, G, kLg, HD>(p, sm_m, sm_l, &sm_o[0][0][0], s, row, kvh, sub, split, ctx);
}

template <typename T, int HD, bool kPrmt>
void launch_g(const decode::Params& p, const Fp8Layout& f, int g_bucket, dim3 grid, cudaStream_t stream) {
  if (g_bucket == 1) decode_fp8_kernel<T, HD, 1, kPrmt><<<grid, kThreads, 0, stream>>>(p, f);
  else if (g_bucket == 4) decode_fp8_kernel<T, HD, 4, kPrmt><<<grid, kThreads, 0, stream>>>(p, f);
  else decode_fp8_kernel<T, HD, 8, kPrmt><<<grid, kThreads, 0, stream>>>(p, f);
  CUDA_CHECK_LAUNCH();
}

template <typename T, bool kPrmt>
void launch_hd(int hd, const decode::Params& p, const Fp8Layout& f, int g_bucket, dim3 grid, cudaStream_t stream) {
  switch (hd) {
    case 32: return launch_g<T, 32, kPrmt>(p, f, g_bucket, grid, stream);
    case 64: return launch_g<T, 64, kPrmt>(p, f, g_bucket, grid, stream);
    case 128: return launch_g<T, 128, kPrmt>(p, f, g_bucket, grid, stream);
    default: throw std::invalid_argument("decode_attention_fp8: head_dim " + std::to_string(hd) + " not built (32, 64, 128)");
  }
}

}  // namespace decode_fp8_detail

Fp8KvDecode fp8_kv_decode_by_shape(int n_seqs, int n_kv_heads, int group, int max_context, int n_sms, bool bulk_fits) {
  const int64_t pairs = int64_t(n_seqs) * n_kv_heads;
  if (bulk_fits)
    return group < 4 && pairs * ((std::max(max_context, 1) + 1023) / 1024) >= 3 * int64_t(n_sms) ? Fp8KvDecode::mma_bulk
                                                                                               : Fp8KvDecode::mma_regs;
  return pairs >= 4 * int64_t(n_sms) ? Fp8KvDecode::mma_async4f : Fp8KvDecode::mma2;
}

namespace {
/// Whether mma_bulk's condition holds: every step a whole 16-aligned page (paged blocks a multiple
/// of 16; split lengths are multiples of 16), head_dim 128, and sm_90's bulk copies.
bool fp8_kv_bulk_fits(const DecodeAttentionArgs& a) {
  if (a.kv.kind != KvLayoutKind::paged || a.kv.block_size % 16 != 0 || a.shape.head_dim != 128) return false;
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9;
}
}  // namespace

Fp8KvDecode resolve_fp8_kv_decode(const DecodeAttentionArgs& a, int n_sms, Fp8KvDecode variant) {
  const bool bulk_fits = fp8_kv_bulk_fits(a);
  if (variant == Fp8KvDecode::by_env) {
    const char* e = std::getenv("SERVELAB_FP8KV_DECODE");
    const std::string v = e ? e : "";
    variant = v == "shift_mask"    ? Fp8KvDecode::shift_mask
              : v == "prmt"        ? Fp8KvDecode::prmt
              : v == "mma"         ? Fp8KvDecode::mma
              : v == "mma_async"   ? Fp8KvDecode::mma_async
              : v == "mma_async3"  ? Fp8KvDecode::mma_async3
              : v == "mma_async4"  ? Fp8KvDecode::mma_async4
              : v == "mma_async4f" ? Fp8KvDecode::mma_async4f
              : v == "mma_bulk"    ? Fp8KvDecode::mma_bulk
              : v == "mma_regs"    ? Fp8KvDecode::mma_regs
              : v == "mma2"        ? Fp8KvDecode::mma2
                                   : fp8_kv_decode_by_shape(a.n_seqs, a.shape.n_kv_heads, a.n_heads / std::max(a.shape.n_kv_heads, 1),
                                                            a.max_context, n_sms, bulk_fits);
  }
  const bool mma_fits = (a.shape.head_dim == 64 || a.shape.head_dim == 128) && a.shape.n_slots < (int64_t(1) << 31);
  const bool tc = variant == Fp8KvDecode::mma || variant == Fp8KvDecode::mma2 || fp8_kv_ring_blocks(variant) > 0 ||
                  fp8_kv_regs(variant);
  if (tc && !mma_fits) return Fp8KvDecode::shift_mask;
  if ((variant == Fp8KvDecode::mma_bulk || fp8_kv_regs(variant)) && !bulk_fits) return Fp8KvDecode::mma_async4f;
  return variant;
}

DecodeSplit decode_attention_fp8_split(const DecodeAttentionArgs& a, int n_sms, Fp8KvDecode variant) {
  variant = resolve_fp8_kv_decode(a, n_sms, variant);
  DecodeAttentionArgs b = a;
  if (variant != Fp8KvDecode::shift_mask && variant != Fp8KvDecode::prmt) {
    // The bf16 tensor-core kernel's cut (8 query heads a block, >= 128 positions a split) for the
    // 2 blocks an SM holds of these kernels (the bf16 rule aims at 1 for its load pipeline), without
    // its cluster merge or pipeline (these kernels have neither). Measured on an H200
    // (results/gpu/quant/h200-2026-11-29-61be400-fp8kv2, mma2 against mma2_bps2): equal within
    // the noise where both cut alike, faster where the grid is small (b32 x 4k x GQA 8: 67.8 ->
    // 51.3 us, b1 x 4k x GQA 1: 24.3 -> 20.8 us). A group of 1 is cut as a group of 2: the same
    // blocks (one per KV head), which use_tensor_cores refuses.
    if (b.split.blocks_per_sm == 0 && b.split.fixed_split_len == 0) b.split.blocks_per_sm = std::max(2, fp8_kv_ring_blocks(variant));
    b.tensor_cores = true;
    b.pipeline = false;
    b.max_cluster_splits = 0;
    b.n_heads = std::max(a.n_heads, 2 * a.shape.n_kv_heads);
  } else {
    b.tensor_cores = false;  // the CUDA-core kernel's cut (resident blocks 7 / 4 / 2 per SM)
  }
  DecodeSplit r = decode_attention_split(b, n_sms);
  r.pipeline = false;
  return r;
}

void decode_attention_fp8(const DecodeAttentionArgs& a, cudaStream_t stream, Fp8KvDecode variant) {
  using namespace decode_fp8_detail;
  if (a.n_seqs == 0) return;
  if (a.shape.n_kv_heads <= 0 || a.n_heads % a.shape.n_kv_heads != 0)
    throw std::invalid_argument("decode_attention_fp8: n_heads must be a multiple of n_kv_heads");
  if (a.split.fixed_split_len < 0 || a.split.fixed_split_len % 16 != 0)
    throw std::invalid_argument("decode_attention_fp8: fixed_split_len must be a multiple of 16");
  if (a.split.min_split_len < 0 || a.split.blocks_per_sm < 0)
    throw std::invalid_argument("decode_attention_fp8: min_split_len and blocks_per_sm must be >= 0");
  int device = 0, n_sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, device));
  variant = resolve_fp8_kv_decode(a, n_sms, variant);
  const DecodeSplit split = decode_attention_fp8_split(a, n_sms, variant);
  const int hd = a.shape.head_dim, group = a.n_heads / a.shape.n_kv_heads;
  const int gb = split.tensor_cores ? decode::kMmaHeads : group == 1 ? 1 : group <= 4 ? 4 : 8;
  decode::Params p{};
  p.q = a.q;
  p.q_row_stride = a.q_row_stride;
  p.query_start = a.query_start;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.kv_row = a.shape.row_elems();  // unused by this kernel (it addresses by Fp8Layout)
  p.n_heads = a.n_heads;
  p.group = group;
  p.n_sub = ceil_div(group, gb);
  p.context_lens = a.context_lens;
  p.kv = a.kv;
  p.scale_log2 = a.scale * decode::kLog2e;
  p.out = a.out;
  p.out_row_stride = a.out_row_stride;
  p.split_len = split.split_len;
  p.max_splits = split.n_splits;
  p.partial = split.reduce;
  p.cluster = false;
  p.release_arrive = a.release_arrive;
  p.bs_shift = -1;
  if (a.kv.kind == KvLayoutKind::paged) {
    if (a.kv.block_size < 1) throw std::invalid_argument("decode_attention_fp8: block_size must be >= 1");
    if ((a.kv.block_size & (a.kv.block_size - 1)) == 0) p.bs_shift = __builtin_ctz(unsigned(a.kv.block_size));
  }
  const dim3 grid(a.shape.n_kv_heads * p.n_sub, a.n_seqs, split.n_splits);
  if (split.reduce) {  // decode_attention's workspace layout: partials, then the counters at the end
    const size_t need = decode_attention_workspace_bytes(a.n_seqs, a.n_heads, hd, split.n_splits);
    const size_t n_ctr = a.workspace_bytes / (4 * size_t(hd + 3)), ctr_at = a.workspace_bytes / 4 - n_ctr;
    const size_t partial_floats = size_t(a.n_seqs) * a.n_heads * split.n_splits * (hd + 2);
    if (a.workspace == nullptr || a.workspace_bytes < need || partial_floats > ctr_at || size_t(a.n_seqs) * grid.x > n_ctr)
      throw std::invalid_argument("decode_attention_fp8: workspace of " + std::to_string(a.workspace_bytes) +
                                  " bytes, needs " + std::to_string(need));
    p.ws_o = a.workspace;
    p.ws_ml = a.workspace + size_t(a.n_seqs) * a.n_heads * split.n_splits * hd;
    p.counters = reinterpret_cast<int32_t*>(a.workspace) + ctr_at;
  }
  const Fp8Layout f = Fp8KvLayout::of(a.shape.n_kv_heads, hd);
  if (fp8_kv_regs(variant))
    decode_fp8::launch_decode_fp8_regs(a.dtype, hd, p, f, grid, stream);
  else if (fp8_kv_ring_blocks(variant) > 0)
    decode_fp8::launch_decode_fp8_async(a.dtype, hd, fp8_kv_ring_blocks(variant), fp8_kv_f16(variant),
                                        variant == Fp8KvDecode::mma_bulk, p, f, grid, stream);
  else if (split.tensor_cores)
    decode_fp8::launch_decode_fp8_mma(a.dtype, hd, variant == Fp8KvDecode::mma2 ? decode_fp8::kMmaStepsNarrow
                                                                                 : decode_fp8::kMmaStepsWide,
                                      p, f, grid, stream);
  else if (variant == Fp8KvDecode::prmt)
    SERVELAB_DISPATCH_16(a.dtype, (launch_hd<__nv_bfloat16, true>(hd, p, f, gb, grid, stream)),
                         (launch_hd<__half, true>(hd, p, f, gb, grid, stream)));
  else
    SERVELAB_DISPATCH_16(a.dtype, (launch_hd<__nv_bfloat16, false>(hd, p, f, gb, grid, stream)),
                         (launch_hd<__half, false>(hd, p, f, gb, grid, stream)));
}

}  // namespace servelab::kernels
