// quant_gemv (quant_gemv.h): the dispatch between the tensor-core kernels (quant_gemv_stream.cu,
// quant_gemv_mma.cu) and the warp-per-row kernel below, which takes what the others do not: INT4
// groups that are not a multiple of 128, and a K slice too long for shared memory when the caller
// gave no workspace.
// Warp-per-row kernel: a warp per output row n. Lane l takes k = 16 l, 16 l + 512, ...: one
// 16-byte (FP8) or 8-byte (INT4) load of the row's codes per step, dequantized in registers with
// the row's (group's) scale, then multiplied into M accumulators against x's 16 values of each
// row (x is small and shared by every warp: it stays in L1/L2). The M partial sums are reduced
// across the warp in a fixed order, so results are deterministic.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/quant_gemv.h"
#include "kernels/gemv_plan.h"
#include "kernels/quant_gemv_plan.h"
#include "kernels/quant_gemv_stream_plan.h"

namespace servelab::kernels {

// quant_gemv_mma.cu
size_t quant_gemv_mma_smem(const QuantGemvArgs& a, const quant_gemv_plan::Plan& plan);
void quant_gemv_mma(const QuantGemvArgs& a, const quant_gemv_plan::Plan& plan, cudaStream_t stream);
// quant_gemv_stream.cu
void quant_gemv_stream(const QuantGemvArgs& a, const quant_gemv_stream_plan::Plan& plan, cudaStream_t stream);
// quant_gemv_steps.cu
gemv::Plan quant_gemv_steps_plan(const QuantGemvArgs& a, int n_sms);
void quant_gemv_steps(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream);
// quant_gemv_packed.cu
gemv::Plan quant_gemv_packed_plan(const QuantGemvArgs& a, int n_sms);
void quant_gemv_packed(const QuantGemvArgs& a, const gemv::Plan& plan, cudaStream_t stream);

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kLaneK = 16;  // consecutive k per lane and step

__device__ __forceinline__ float fp8_to_float(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

template <int M, bool kInt4, bool kBf16Out>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) quant_gemv_kernel(QuantGemvArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarpsPerBlock + warp;
  if (n >= a.n) return;
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  const float channel_scale = kInt4 ? 0.0f : a.scales[a.n_scales == 1 ? 0 : n];
  for (int k0 = lane * kLaneK; k0 < a.k; k0 += 32 * kLaneK) {
    float w[kLaneK];
    if constexpr (!kInt4) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(a.w + size_t(n) * a.k + k0));
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&raw);
#pragma unroll
      for (int i = 0; i < kLaneK; ++i) w[i] = fp8_to_float(b[i]) * channel_scale;
    } else {
      const uint2 raw = __ldg(reinterpret_cast<const uint2*>(a.w + size_t(n) * (a.k / 2) + k0 / 2));
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&raw);
      const size_t g = size_t(k0 / a.group_size) * a.n + n;
      const float s = __ldg(a.scales + g), z = __ldg(a.zeros + g);
#pragma unroll
      for (int i = 0; i < kLaneK / 2; ++i) {
        w[2 * i] = (float(b[i] & 0xf) - z) * s;
        w[2 * i + 1] = (float(b[i] >> 4) - z) * s;
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const uint4* xr = reinterpret_cast<const uint4*>(x + m * a.x_stride + k0);
      const uint4 lo = xr[0], hi = xr[1];
      const __nv_bfloat162* p0 = reinterpret_cast<const __nv_bfloat162*>(&lo);
      const __nv_bfloat162* p1 = reinterpret_cast<const __nv_bfloat162*>(&hi);
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f0 = __bfloat1622float2(p0[i]), f1 = __bfloat1622float2(p1[i]);
        s += w[2 * i] * f0.x + w[2 * i + 1] * f0.y + w[8 + 2 * i] * f1.x + w[8 + 2 * i + 1] * f1.y;
      }
      acc[m] += s;
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = acc[m];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) {
      if constexpr (kBf16Out) {
        __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.y) + size_t(m) * a.n + n;
        *out = __float2bfloat16_rn(a.accumulate ? __bfloat162float(*out) + v : v);
      } else {
        float* out = static_cast<float*>(a.y) + size_t(m) * a.n + n;
        *out = a.accumulate ? *out + v : v;
      }
    }
  }
}

template <bool kInt4, bool kBf16Out>
void launch(const QuantGemvArgs& a, cudaStream_t stream) {
  const dim3 grid((a.n + kWarpsPerBlock - 1) / kWarpsPerBlock), block(kWarpsPerBlock * 32);
  switch (a.m) {
#define SERVELAB_QUANT_GEMV_CASE(M) \
  case M: quant_gemv_kernel<M, kInt4, kBf16Out><<<grid, block, 0, stream>>>(a); break;
    SERVELAB_QUANT_GEMV_CASE(1) SERVELAB_QUANT_GEMV_CASE(2) SERVELAB_QUANT_GEMV_CASE(3) SERVELAB_QUANT_GEMV_CASE(4)
    SERVELAB_QUANT_GEMV_CASE(5) SERVELAB_QUANT_GEMV_CASE(6) SERVELAB_QUANT_GEMV_CASE(7) SERVELAB_QUANT_GEMV_CASE(8)
    SERVELAB_QUANT_GEMV_CASE(9) SERVELAB_QUANT_GEMV_CASE(10) SERVELAB_QUANT_GEMV_CASE(11) SERVELAB_QUANT_GEMV_CASE(12)
    SERVELAB_QUANT_GEMV_CASE(13) SERVELAB_QUANT_GEMV_CASE(14) SERVELAB_QUANT_GEMV_CASE(15) SERVELAB_QUANT_GEMV_CASE(16)
#undef SERVELAB_QUANT_GEMV_CASE
    default: throw std::invalid_argument("quant_gemv: m must be in [1, 16]");
  }
}

int current_sm_count() {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

}  // namespace

int64_t quant_gemv_workspace_floats(int max_n, int max_k) {  // either tensor-core kernel's plan
  const int sms = current_sm_count();
  return std::max(quant_gemv_plan::workspace_floats(max_n, max_k, sms),
                  quant_gemv_stream_plan::workspace_floats(max_n, max_k, sms));
}

int quant_gemv_workspace_counters(int max_n) {
  const int steps = 2 * ((max_n + gemv::kBlockRows - 1) / gemv::kBlockRows);  // steps: row blocks x column tiles
  return std::max({quant_gemv_plan::workspace_counters(max_n), quant_gemv_stream_plan::workspace_counters(max_n), steps});
}

const char* to_string(QuantGemvKernel k) {
  switch (k) {
    case QuantGemvKernel::auto_select: return "auto";
    case QuantGemvKernel::warp: return "warp";
    case QuantGemvKernel::mma: return "mma";
    case QuantGemvKernel::stream: return "stream";
    case QuantGemvKernel::steps: return "steps";
    case QuantGemvKernel::packed: return "packed";
  }
  return "?";
}

QuantGemvKernel parse_quant_gemv_kernel(const char* s) {
  for (QuantGemvKernel k : {QuantGemvKernel::auto_select, QuantGemvKernel::warp, QuantGemvKernel::mma,
                            QuantGemvKernel::stream, QuantGemvKernel::steps, QuantGemvKernel::packed})
    if (std::strcmp(s, to_string(k)) == 0) return k;
  throw std::invalid_argument(std::string("quant_gemv kernel '") + s +
                              "' is not one of auto, warp, mma, stream, steps, packed");
}

QuantGemvKernel quant_gemv_auto_kernel(QuantWeightKind kind, int m) {
  // H200, kernel_bench --quant-only (results/gpu/quant/h200-2026-11-29-*): llama2-7b's decode-step
  // products, steps against stream, ms: FP8 2.06/2.42 (M1), 2.10/2.53 (M2), 2.12/2.73 (M4),
  // 2.15/3.15 (M8); INT4 1.70/2.04, 1.71/2.16, 1.74/2.39, 1.79/2.84. At M16, since steps takes two
  // column tiles (0327c2b): FP8 steps 2.52 against stream 4.11 and mma 4.77; INT4 steps 2.30
  // against mma 3.86 and stream 3.80 (bf16 3.76).
  // The packed kernel (INT4, b7024c9): llama2-7b's INT4 decode-step products 2.00-2.07 ms at M1
  // against steps' 1.70 with its cp.async ring; without the ring (loads in registers) 0.62 of the
  // copy against 0.54 on QKV but 0.29 against 0.39 on O at M1; 1.74 against steps' 1.40 at 0327c2b:
  // not auto's.
  (void)kind;
  return m <= kQuantGemvStepsMaxRows ? QuantGemvKernel::steps : QuantGemvKernel::stream;
}

QuantGemvKernel quant_gemv_env_kernel() {  // SERVELAB_QUANT_GEMV, read once
  static const QuantGemvKernel k = [] {
    const char* s = std::getenv("SERVELAB_QUANT_GEMV");
    return s && *s ? parse_quant_gemv_kernel(s) : QuantGemvKernel::auto_select;
  }();
  return k;
}

QuantGemvKernel quant_gemv_kernel_for(const QuantGemvArgs& a) {
  QuantGemvKernel want = a.kernel;
  if (want == QuantGemvKernel::auto_select) want = quant_gemv_env_kernel();
  const bool int4 = a.kind == QuantWeightKind::int4;
  const bool packed = int4 && a.w_packed && a.w_packed_groups;
  if (want == QuantGemvKernel::auto_select) want = quant_gemv_auto_kernel(a.kind, a.m);
  if (int4 && a.group_size % 128 != 0) return QuantGemvKernel::warp;  // a 128-chunk of INT4 must lie in one group
  if (want == QuantGemvKernel::packed) {
    if (packed && a.m <= gemv::kMaxRows && a.k % 128 == 0 && (a.silu_ffn == 0 || a.silu_ffn % 16 == 0) &&
        a.rope.head_dim == 0)
      return QuantGemvKernel::packed;
    want = QuantGemvKernel::steps;
  }
  if (want == QuantGemvKernel::steps) {  // INT4 groups a power of two (a shift for the group index)
    if (!int4 || (a.group_size & (a.group_size - 1)) == 0) return QuantGemvKernel::steps;
    want = QuantGemvKernel::stream;
  }
  const int sms = current_sm_count();
  if (want == QuantGemvKernel::stream) {
    if (quant_gemv_stream_plan::fits(int4, quant_gemv_stream_plan::make_plan(int4, a.n, a.k, sms, a.partials != nullptr,
                                                                         a.stream_blocks_per_sm)))
      return QuantGemvKernel::stream;
    want = QuantGemvKernel::mma;
  }
  if (want == QuantGemvKernel::mma) {
    const quant_gemv_plan::Plan plan = quant_gemv_plan::make_plan(int4, a.n, a.k, sms, a.partials != nullptr);
    if (quant_gemv_plan::max_slice_k(int4, plan) <= quant_gemv_plan::kMaxSliceK) return QuantGemvKernel::mma;
  }
  return QuantGemvKernel::warp;
}

void validate(const QuantGemvArgs& a) {
  auto bad = [](const std::string& what) { return std::invalid_argument("quant_gemv: " + what); };
  if (a.m < 1 || a.m > 16) throw bad("m (" + std::to_string(a.m) + ") must be in [1, 16]");
  if (a.n < 1) throw bad("n must be >= 1");
  if (a.k < 16 || a.k % 16 != 0) throw bad("k (" + std::to_string(a.k) + ") must be a positive multiple of 16");
  if (a.x_stride < a.k || a.x_stride % 8 != 0) throw bad("x_stride must be >= k and a multiple of 8");
  if (!a.x || !a.y || (!a.w_packed && (!a.w || !a.scales)))
    throw bad("x, y and the weights (w and scales, or int4's w_packed) must be set");
  if (reinterpret_cast<uintptr_t>(a.x) % 16 || reinterpret_cast<uintptr_t>(a.w) % 16)
    throw bad("x and w must be 16-byte aligned");
  if ((a.partials == nullptr) != (a.counters == nullptr)) throw bad("partials and counters go together");
  if (a.silu_ffn > 0 && (a.n != 2 * a.silu_ffn || !a.out_bf16 || a.accumulate))
    throw bad("fused SiLU needs n = 2 * silu_ffn, bf16 output and no accumulate");
  if (a.rope.head_dim > 0 &&
      (a.silu_ffn > 0 || !a.out_bf16 || a.accumulate || a.rope.head_dim % 32 != 0 ||
       a.n != (a.rope.n_heads + 2 * a.rope.n_kv_heads) * a.rope.head_dim || !a.rope.positions || !a.rope.inv_freq ||
       !a.rope.k_cache || !a.rope.v_cache))
    throw bad("the RoPE/KV-write epilogue needs bf16 output, no accumulate or SiLU, head_dim a multiple of 32, n the "
              "q|k|v width, positions, inv_freq and both caches");
  if (a.kind == QuantWeightKind::fp8_e4m3 && (a.w_packed || a.w_packed_groups)) throw bad("w_packed is INT4's");
  if (a.kind == QuantWeightKind::fp8_e4m3 && a.n_scales != 1 && a.n_scales != a.n)
    throw bad("fp8 n_scales must be 1 or n");
  if (a.kind == QuantWeightKind::int4) {
    if (!a.zeros && a.w) throw bad("int4 needs zeros");
    if ((a.w_packed == nullptr) != (a.w_packed_groups == nullptr)) throw bad("w_packed and w_packed_groups go together");
    if (reinterpret_cast<uintptr_t>(a.w_packed) % 16 || reinterpret_cast<uintptr_t>(a.w_packed_groups) % 16)
      throw bad("w_packed and w_packed_groups must be 16-byte aligned");
    if (a.group_size < 16 || a.group_size % 16 != 0 || a.k % a.group_size != 0)
      throw bad("group_size must be a multiple of 16 dividing k");
  }
}

void quant_gemv(const QuantGemvArgs& a, cudaStream_t stream) {
  validate(a);
  const bool int4 = a.kind == QuantWeightKind::int4;
  const QuantGemvKernel kernel = quant_gemv_kernel_for(a);
  auto check_workspace = [&](int64_t floats, int counters) {
    if (floats > a.partial_capacity || counters > a.counter_capacity)
      throw std::invalid_argument("quant_gemv: the workspace is smaller than N=" + std::to_string(a.n) + " K=" +
                                  std::to_string(a.k) + " needs (quant_gemv_workspace_floats / _counters)");
  };
  if (a.silu_ffn > 0 && kernel != QuantGemvKernel::steps && kernel != QuantGemvKernel::packed)
    throw std::invalid_argument(std::string("quant_gemv: fused SiLU runs on the steps and packed kernels only (this "
                                            "product takes ") + to_string(kernel) + ")");
  if (a.rope.head_dim > 0 && kernel != QuantGemvKernel::steps)
    throw std::invalid_argument(std::string("quant_gemv: the RoPE/KV-write epilogue runs on the steps kernel only "
                                            "(this product takes ") + to_string(kernel) + ")");
  if (kernel != QuantGemvKernel::packed && !a.w)
    throw std::invalid_argument(std::string("quant_gemv: only the packed INT4 layout is given, and the ") +
                                to_string(kernel) + " kernel takes this product (m = " + std::to_string(a.m) +
                                "; the packed kernel takes m <= 8, K a multiple of 128)");
  if (kernel == QuantGemvKernel::packed) {
    const gemv::Plan plan = quant_gemv_packed_plan(a, current_sm_count());
    if (plan.splits > 1) check_workspace(plan.partial_floats(), plan.row_blocks);
    quant_gemv_packed(a, plan, stream);
  } else if (kernel == QuantGemvKernel::steps) {
    const gemv::Plan plan = quant_gemv_steps_plan(a, current_sm_count());
    const int col_tiles = a.m > gemv::kMaxRows ? 2 : 1;  // M 9-16: the second tile's partials and counters after
    if (plan.splits > 1) check_workspace(col_tiles * plan.partial_floats(), col_tiles * plan.row_blocks);
    quant_gemv_steps(a, plan, stream);
  } else if (kernel == QuantGemvKernel::stream) {
    namespace sp = quant_gemv_stream_plan;
    const sp::Plan plan =
        sp::make_plan(int4, a.n, a.k, current_sm_count(), a.partials != nullptr, a.stream_blocks_per_sm);
    if (plan.splits > 1) check_workspace(plan.partial_floats(), plan.row_blocks);
    quant_gemv_stream(a, plan, stream);
  } else if (kernel == QuantGemvKernel::mma) {
    namespace qp = quant_gemv_plan;
    const qp::Plan plan = qp::make_plan(int4, a.n, a.k, current_sm_count(), a.partials != nullptr);
    if (plan.splits > 1) check_workspace(plan.partial_floats(), plan.row_blocks);
    quant_gemv_mma(a, plan, stream);
  } else if (a.out_bf16) {
    int4 ? launch<true, true>(a, stream) : launch<false, true>(a, stream);
  } else {
    int4 ? launch<true, false>(a, stream) : launch<false, false>(a, stream);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
