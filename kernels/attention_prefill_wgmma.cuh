#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a only) wrappers for the prefill attention kernels
// (attention_prefill_wgmma.cu: v4.1; attention_prefill_wgmma_ws.cu: v5): shared-memory matrix
// descriptors, the fences, and m64n128k16 with fp32 accumulators in bf16 and fp16, A from shared
// memory or from registers; then what both kernels share (tile constants, Params, the shared
// memory layout, cp.async and conversion helpers). Call the device parts only from code compiled
// for sm_90a (the instructions exist there alone).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/mma_util.cuh"
#include "kernels/ref/exp2_poly.h"

namespace servelab::kernels::wgmma {

/// Shared-memory matrix descriptor, 128-byte swizzle (PTX ISA, "matrix descriptor"): start
/// address, leading and stride byte offsets, each >> 4; base offset 0 (atoms 1024-byte aligned).
/// K-major operands: 8-row groups of 128-byte rows at sbo bytes, lbo unused (16). MN-major
/// (transposed) operands: lbo = bytes between 64-element column blocks, sbo = bytes between
/// 8-row (k) groups.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) |
         (uint64_t(1) << 62);
}

/// Orders earlier register and shared-memory accesses before the next wgmma of the warpgroup.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/// Waits until at most N committed wgmma groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
/// Makes this thread's generic-proxy shared-memory writes (cp.async included) visible to wgmma.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/// Keeps the compiler from moving accesses of the accumulators across a wgmma issue or wait.
template <int N>
__device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
/// The same for A fragments in registers: keeps them live (unmoved) until after the wait.
template <int N>
__device__ __forceinline__ void pin_u32(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}

// The 64 fp32 accumulators of one m64n128 wgmma: operands %0-%63, and their register list.
#define SERVELAB_WGMMA_D64(d)                                                                               \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),         \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),   \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define SERVELAB_WGMMA_D64_REGS                                                      \
  "{"                                                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"   \
  "}"

// m64n128k16 with fp32 accumulators on element type TY ("bf16", "f16"): A and B from shared
// memory by descriptor (scale_d 0: d = A · B) ...
#define SERVELAB_WGMMA_SS(NAME, TY)                                                              \
  __device__ __forceinline__ void NAME(float (&d)[64], uint64_t da, uint64_t db, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                    \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                    \
                 SERVELAB_WGMMA_D64_REGS ", %64, %65, p, 1, 1, 0, 0;\n}\n"                       \
                 : SERVELAB_WGMMA_D64(d)                                                         \
                 : "l"(da), "l"(db), "r"(scale_d));                                              \
  }
// ... or A from registers and B MN-major (transposed) from shared memory.
#define SERVELAB_WGMMA_RS(NAME, TY)                                                            \
  __device__ __forceinline__ void NAME(float (&d)[64], const uint32_t (&a)[4], uint64_t db) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                  \
                 SERVELAB_WGMMA_D64_REGS ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"       \
                 : SERVELAB_WGMMA_D64(d)                                                       \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));               \
  }
// m64n8k16, A from registers, B K-major from shared memory by descriptor, d += A · B (fa9: the
// row sums of P against a ones matrix; d[0], d[1] row 16w + g, d[2], d[3] row 16w + g + 8).
#define SERVELAB_WGMMA_RS_N8(NAME, TY)                                                                     \
  __device__ __forceinline__ void NAME(float (&d)[4], const uint32_t (&a)[4], uint64_t db) {              \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"                                              \
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32." TY "." TY " "                                \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"                               \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));                           \
  }
SERVELAB_WGMMA_RS_N8(wgmma_rs_n8_bf16, "bf16")
SERVELAB_WGMMA_RS_N8(wgmma_rs_n8_f16, "f16")
#undef SERVELAB_WGMMA_RS_N8
SERVELAB_WGMMA_SS(wgmma_ss_bf16, "bf16")
SERVELAB_WGMMA_RS(wgmma_rs_bf16, "bf16")
SERVELAB_WGMMA_SS(wgmma_ss_f16, "f16")
SERVELAB_WGMMA_RS(wgmma_rs_f16, "f16")
#undef SERVELAB_WGMMA_SS
#undef SERVELAB_WGMMA_RS
#undef SERVELAB_WGMMA_D64_REGS
#undef SERVELAB_WGMMA_D64

/// d += A · Bᵀ-style product with A and B from shared memory (scale_d 0: d = A · B).
template <typename T>
__device__ __forceinline__ void mma_ss(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) wgmma_ss_bf16(d, da, db, scale_d);
  else wgmma_ss_f16(d, da, db, scale_d);
}
/// d += A · B with A in registers and B MN-major in shared memory.
template <typename T>
__device__ __forceinline__ void mma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) wgmma_rs_bf16(d, a, db);
  else wgmma_rs_f16(d, a, db);
}

/// d (64 x 8) += A (64 x 16, registers) · B (16 x 8, K-major in shared memory, no swizzle).
template <typename T>
__device__ __forceinline__ void mma_rs_n8(float (&d)[4], const uint32_t (&a)[4], uint64_t db) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) wgmma_rs_n8_bf16(d, a, db);
  else wgmma_rs_n8_f16(d, a, db);
}
/// Shared-memory matrix descriptor without swizzle (layout type 0): core matrices of 8 rows x 16
/// bytes, lbo / sbo bytes apart along K / along M or N (fa9's ones matrix: every byte read is 1.0).
__device__ __forceinline__ uint64_t desc_none(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
}

}  // namespace servelab::kernels::wgmma

// ---- shared by the prefill wgmma kernels (attention_prefill_wgmma.cu: v4.1; _ws.cu: v5) ----

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SERVELAB_WGMMA_DEVICE 1
#else
#define SERVELAB_WGMMA_DEVICE 0
#endif

namespace servelab::kernels::prefill_wgmma {

constexpr int kThreads = 256, kBM = 128, kBN = 128, kHD = 128, kStages = 3;
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kBM == kBN, "Q and K/V tiles share one layout");

struct Params {
  const void* q;
  int64_t q_row_stride;
  const void* k_cache;
  const void* v_cache;
  int64_t kv_row;
  int n_heads, n_kv, group, n_seqs;
  const int32_t* query_start;
  const int32_t* context_lens;
  KvAddressing kv;
  int block_shift;  ///< log2(kv.block_size) when a power of two, else -1
  float scale_log2;
  void* out;
  int64_t out_row_stride;
  int64_t n_slots;  ///< slots in each arena (v6's tensor maps)
};

/// Shared memory, in bytes from a 1024-aligned base. A tile (Q, or one stage of K or V) is two
/// halves of 128 rows x 128 bytes (head_dim 0-63, 64-127), 16 KB each.
struct Layout {
  static constexpr uint32_t kHalf = kBM * 128, kTile = 2 * kHalf;
  static constexpr uint32_t kQ = 0, kK = kTile, kV = kK + kStages * kTile, kRows = kV + kStages * kTile;
  static constexpr uint32_t kBytes = kRows + (3 * kBM + 2) * sizeof(int);
  static constexpr size_t kAlloc = kBytes + 1024;  // room to round the base up to 1024
};

// ---- v5: warp-specialized (a producer warpgroup, two consumers), per-stage mbarriers ----------
// Warpgroup 0 gathers Q and the K/V tiles by cp.async (each thread's copies complete on the
// stage's "full" mbarrier: cp.async.mbarrier.arrive.noinc) and waits on the stage's "empty"
// mbarrier before refilling it; warpgroups 1 and 2 run the same MMA/softmax schedule as
// prefill_wgmma_kernel, waiting on "full" and releasing a stage (one arrive per warp) once the
// wgmma that read it has completed. No block-wide barrier per key tile; setmaxnreg gives the
// producer 56 registers and the consumers 224 (v5.1: 16 slots kept per tile; 40 and 48 spilled).
/// The warp-specialized kernels' (attention_prefill_wgmma_ws.cu) threads and shared memory: Layout,
/// then the stages' mbarriers.
constexpr int kThreadsWs = 384;
struct LayoutWs {
  static constexpr uint32_t kBars = Layout::kBytes;  // 8-aligned (kRows + 1544)
  // full_q, full_k[3], full_v[3], empty_k[3], empty_v[3]
  static constexpr uint32_t kFullQ = kBars, kFullK = kFullQ + 8, kFullV = kFullK + 8 * kStages,
                            kEmptyK = kFullV + 8 * kStages, kEmptyV = kEmptyK + 8 * kStages;
  static constexpr uint32_t kBytes = kEmptyV + 8 * kStages;
  static constexpr size_t kAlloc = kBytes + 1024;
  /// fa9: a 16 x 8 ones matrix (two no-swizzle core matrices, 256 bytes), P·1 = the row sums.
  static constexpr uint32_t kOnes = (kBytes + 15) & ~15u, kOnesBytes = 256;
  static constexpr size_t kAllocOnes = kOnes + kOnesBytes + 1024;
};
static_assert(LayoutWs::kAllocOnes <= 227 * 1024, "fa9's shared memory exceeds the sm_90 block limit");
static_assert(Layout::kBytes % 8 == 0, "mbarriers need 8-byte alignment");

// smem_u32, cp_async16, cp_async_commit/wait and pack2 come from kernels/mma_util.cuh.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
/// fa7 (seventh pass): exp2 on the FMA pipe, FlashAttention-4's Cody-Waite split and degree-3
/// polynomial (kernels/ref/exp2_poly.h: coefficients, error bounds, and exp2_poly3, the C++
/// reference of these bits): clamp, floor by a round-down add, the fraction, 3 Horner FFMAs, the
/// integer part shifted into the exponent bits. 8 FMA/ALU instructions instead of one MUFU.EX2;
/// -inf gives exactly +0 and 0 exactly 1, as ex2.approx.ftz does.
__device__ __forceinline__ float ex2_poly(float x) {
  x = fmaxf(x, exp2_poly::kMin);
  const float r = __fadd_rd(x, exp2_poly::kRound);  // kRound + floor(x), exactly
  const float f = __fsub_rn(x, __fsub_rn(r, exp2_poly::kRound));
  const float p = __fmaf_rn(__fmaf_rn(__fmaf_rn(exp2_poly::kC3, f, exp2_poly::kC2), f, exp2_poly::kC1), f, exp2_poly::kC0);
  return __int_as_float(__float_as_int(p) + (__float_as_int(r) << 23));
}
/// fa7's share: of a row's 32 values per thread (index 2j + e, key 8j + c2 + e), those with
/// on_fma(i, n) true (n of 32, spread evenly) take ex2_poly, the others the MUFU.
__host__ __device__ constexpr bool on_fma(int i, int n) { return (i + 1) * n / 32 != i * n / 32; }
/// mbarrier helpers of the warp-specialized kernels (ws, persist): one copy, inlined where used.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred P1;\nLAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\nbra LAB_WAIT;\nDONE:\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// Arrives on bar once every cp.async this thread issued before has completed.
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/// Row tiles (kBM rows of (token, query head) pairs) of sequence s.
__device__ __forceinline__ int seq_row_tiles(const Params& p, int s) {
  return ((p.query_start[s + 1] - p.query_start[s]) * p.group + kBM - 1) / kBM;
}
/// The sequence holding row tile `tile`, counted over all sequences in order (-1 past the last);
/// `tile` becomes its index within that sequence.
__device__ __forceinline__ int find_row_tile(const Params& p, int& tile) {
  for (int s = 0; s < p.n_seqs; ++s) {
    const int n_tiles = seq_row_tiles(p, s);
    if (tile < n_tiles) return s;
    tile -= n_tiles;
  }
  return -1;
}
/// Issues S = Q · Kᵀ of one key tile (64 rows x 128 keys, 8 k-steps of 16 over head_dim, 32 bytes
/// into a half's rows) from the K stage at byte offset st; not waited for. The first k-step
/// overwrites sc.
template <class T>
__device__ __forceinline__ void issue_qk(float (&sc)[64], uint64_t desc_q, uint64_t desc_k, uint32_t st) {
#pragma unroll
  for (int k = 0; k < kHD / 16; ++k) {
    const uint32_t koff = (k / 4) * Layout::kHalf + (k % 4) * 32;
    wgmma::mma_ss<T>(sc, desc_q + (koff >> 4), desc_k + ((st + koff) >> 4), k > 0);
  }
}

/// A consumer thread's online softmax over its two rows (pos0, pos1) of a 64-row warpgroup tile,
/// shared by every wgmma prefill kernel. sc: the S accumulators of one key tile (wgmma order:
/// sc[4j], sc[4j+1] row 0 and sc[4j+2], sc[4j+3] row 1 at keys 8j + c2 + {0, 1}); m: running
/// maximum, l: running sum (two chains a row, fixed order), corr: the last tile's rescale factor,
/// exactly 1 where the maximum did not move, so a tile a row masks whole is an exact no-op.
struct RowPairSoftmax {
  static constexpr float kLazyLog2 = 8.0f;  ///< fa8: P <= 2^8 (FlashAttention-4's threshold)
  /// a[j] = max(a[j], a[j + W]) for j < W, in both rows' arrays (one level of fa6's max trees).
  template <int W>
  __device__ __forceinline__ static void max_halves(float (&a)[kBN / 8], float (&b)[kBN / 8]) {
#pragma unroll
    for (int j = 0; j < W; ++j) {
      a[j] = fmaxf(a[j], a[j + W]);
      b[j] = fmaxf(b[j], b[j + W]);
    }
  }

  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f, corr0 = 1.0f, corr1 = 1.0f;

  /// Key tile t's scores into probabilities (exp2 of scale_log2-scaled logits): the causal mask
  /// where the tile passes wg_min (the warpgroup's first row position), then max, corr and sum.
  /// kFa6 (sixth pass, notes-prefill.md): the thread's row maxima as trees (pairwise, depth 5,
  /// instead of two chains of 16 a row: max is exact and order-free, so the same bits), and the
  /// offset ms and the correction computed without branches (v5.1's conditionals became
  /// predicated constant reloads of scale_log2 in the SASS, on the critical path); the same values.
  /// kPoly (fa7): that many of the thread's 64 exponentials (kPoly / 2 a row, spread by on_fma)
  /// on the FMA pipe (ex2_poly), the rest on the MUFU; the same positions in every tile and row.
  /// kLazy (fa8, FlashAttention-4's conditional rescaling): the running maximum a row keeps moves
  /// only where the tile's maximum passes it by more than kLazyLog2 in the exp2 domain (or where it
  /// was -inf), so P may reach 2^kLazyLog2 and corr is exactly 1 on almost every tile after the
  /// first (the O rescale then skipped warp by warp). The same softmax in exact arithmetic, other
  /// bits; a masked tile is still an exact no-op.
  /// kNoSum (fa9): no row sums here (64 FADDs and the l update a thread): the caller takes them
  /// from the tensor core (P against a ones matrix beside P·V, rescaled with O), so l0 / l1 stay 0.
  template <bool kTree = false, bool kFlat = false, int kPoly = 0, bool kLazy = false, bool kNoSum = false>
  __device__ __forceinline__ void tile(float (&sc)[64], int t, int wg_min, int pos0, int pos1, int c2, float sl2) {
    if (t * kBN + kBN - 1 > wg_min) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int kp = t * kBN + j * 8 + c2 + e;
          if (kp > pos0) sc[4 * j + e] = -INFINITY;
          if (kp > pos1) sc[4 * j + 2 + e] = -INFINITY;
        }
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
    if constexpr (kTree) {  // 16 independent maxima a row, then 8, 4, 2, 1
      float t0[kBN / 8], t1[kBN / 8];
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        t0[j] = fmaxf(sc[4 * j], sc[4 * j + 1]);
        t1[j] = fmaxf(sc[4 * j + 2], sc[4 * j + 3]);
      }
      max_halves<8>(t0, t1);  // constant widths: the arrays stay in registers
      max_halves<4>(t0, t1);
      max_halves<2>(t0, t1);
      max_halves<1>(t0, t1);
      mx0 = t0[0];  // NaN only if all 32 are NaN; fmaxf(m0, NaN) = m0 below, as the chains' -inf
      mx1 = t1[0];
    } else {
      float mx0b = -INFINITY, mx1b = -INFINITY;  // two chains a row
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        mx0 = fmaxf(mx0, sc[4 * j]);
        mx0b = fmaxf(mx0b, sc[4 * j + 1]);
        mx1 = fmaxf(mx1, sc[4 * j + 2]);
        mx1b = fmaxf(mx1b, sc[4 * j + 3]);
      }
      mx0 = fmaxf(mx0, mx0b);
      mx1 = fmaxf(mx1, mx1b);
    }
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
    }
    float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    if constexpr (kLazy) {  // keep m where it is finite and the new maximum is within 2^kLazyLog2 of it
      if (m0 != -INFINITY && __fmul_rn(__fsub_rn(mn0, m0), sl2) <= kLazyLog2) mn0 = m0;
      if (m1 != -INFINITY && __fmul_rn(__fsub_rn(mn1, m1), sl2) <= kLazyLog2) mn1 = m1;
    }
    // An unchanged maximum gives exactly 1 (m0 * sl2 - ms0 contracted into an FMA would leave the
    // rounding error of ms0, not 0).
    float ms0, ms1;
    if constexpr (kFlat) {  // 0 · sl2 = +0 (sl2 > 0, finite): v5.1's 0.0f; ex2(-inf - ms) = 0 where m was -inf
      ms0 = __fmul_rn(mn0 == -INFINITY ? 0.0f : mn0, sl2);
      ms1 = __fmul_rn(mn1 == -INFINITY ? 0.0f : mn1, sl2);
      const float c0 = ex2(__fsub_rn(__fmul_rn(m0, sl2), ms0)), c1 = ex2(__fsub_rn(__fmul_rn(m1, sl2), ms1));
      corr0 = mn0 == m0 ? 1.0f : c0;
      corr1 = mn1 == m1 ? 1.0f : c1;
    } else {
      ms0 = mn0 == -INFINITY ? 0.0f : __fmul_rn(mn0, sl2);
      ms1 = mn1 == -INFINITY ? 0.0f : __fmul_rn(mn1, sl2);
      corr0 = mn0 == m0 ? 1.0f : ex2(__fsub_rn(__fmul_rn(m0, sl2), ms0));
      corr1 = mn1 == m1 ? 1.0f : ex2(__fsub_rn(__fmul_rn(m1, sl2), ms1));
    }
    m0 = mn0;
    m1 = mn1;
    float sum0 = 0.0f, sum1 = 0.0f, sum0b = 0.0f, sum1b = 0.0f;  // two chains a row, fixed order
    static_assert(kPoly >= 0 && kPoly <= 64 && kPoly % 2 == 0, "kPoly: an even share of 64");
    auto exp2_at = [](int i, float x) { return on_fma(i, kPoly / 2) ? ex2_poly(x) : ex2(x); };  // i: constant once unrolled
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      sc[4 * j] = exp2_at(2 * j, fmaf(sc[4 * j], sl2, -ms0));
      sc[4 * j + 1] = exp2_at(2 * j + 1, fmaf(sc[4 * j + 1], sl2, -ms0));
      sc[4 * j + 2] = exp2_at(2 * j, fmaf(sc[4 * j + 2], sl2, -ms1));
      sc[4 * j + 3] = exp2_at(2 * j + 1, fmaf(sc[4 * j + 3], sl2, -ms1));
      if constexpr (kNoSum) continue;
      sum0 += sc[4 * j];
      sum0b += sc[4 * j + 1];
      sum1 += sc[4 * j + 2];
      sum1b += sc[4 * j + 3];
    }
    if constexpr (!kNoSum) {
      l0 = l0 * corr0 + (sum0 + sum0b);
      l1 = l1 * corr1 + (sum1 + sum1b);
    }
  }

  /// O *= corr: the thread's fragment holds 2 rows (corr0, corr1) of kHD / 8 column pairs.
  __device__ __forceinline__ void scale_o(float (&o)[64]) const {
#pragma unroll
    for (int j = 0; j < kHD / 8; ++j) {
      o[4 * j] *= corr0;
      o[4 * j + 1] *= corr0;
      o[4 * j + 2] *= corr1;
      o[4 * j + 3] *= corr1;
    }
  }

  /// O *= corr (after the P · V in flight has landed; kSkipHeld: not where no row of the warp
  /// moved its maximum, a multiply by exactly 1), then P into wgmma A fragments.
  template <class T, bool kSkipHeld>
  __device__ __forceinline__ void rescale_and_pack(float (&o)[64], const float (&sc)[64], uint32_t (&pf)[kBN / 16][4]) const {
    rescale<kSkipHeld>(o);
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      pf[j / 2][(j % 2) * 2] = pack2<T>(sc[4 * j], sc[4 * j + 1]);
      pf[j / 2][(j % 2) * 2 + 1] = pack2<T>(sc[4 * j + 2], sc[4 * j + 3]);
    }
  }

  /// The two halves of rescale_and_pack, for fa5's order (the O rescale issued under the next S
  /// GEMM, FlashAttention-3's): O *= corr (kSkipHeld as above) ...
  template <bool kSkipHeld>
  __device__ __forceinline__ void rescale(float (&o)[64]) const {
    if (!kSkipHeld || __any_sync(0xffffffffu, corr0 != 1.0f || corr1 != 1.0f)) scale_o(o);
  }
  /// fa9: rescale with the tensor core's row sums ls (m64n8 accumulators: ls[0], ls[1] row 0,
  /// ls[2], ls[3] row 1), under the same skip, so l and O always carry the same factors.
  template <bool kSkipHeld>
  __device__ __forceinline__ void rescale(float (&o)[64], float (&ls)[4]) const {
    if (!kSkipHeld || __any_sync(0xffffffffu, corr0 != 1.0f || corr1 != 1.0f)) {
      scale_o(o);
      ls[0] *= corr0;
      ls[1] *= corr0;
      ls[2] *= corr1;
      ls[3] *= corr1;
    }
  }
  /// ... and P into wgmma A fragments.
  template <class T>
  __device__ __forceinline__ static void pack(const float (&sc)[64], uint32_t (&pf)[kBN / 16][4]) {
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      pf[j / 2][(j % 2) * 2] = pack2<T>(sc[4 * j], sc[4 * j + 1]);
      pf[j / 2][(j % 2) * 2 + 1] = pack2<T>(sc[4 * j + 2], sc[4 * j + 3]);
    }
  }
};

/// The warp-specialized kernels (attention_prefill_wgmma_ws.cu): ws v5.1; pingpong v5.1 with the
/// consumer warpgroups taking turns issuing their GEMMs; tma v6 (ping-pong, whole key tiles by TMA
/// where the layout allows: naive, or paged blocks of 2^k >= 16 slots; else v5.1 ping-pong); lean
/// v6.1 (ping-pong, fewer producer instructions, O rescale skipped where a warp's maxima held);
/// persist v7 (attention_prefill_wgmma_persist.cu: v6.1 on a persistent grid, snake order); fa5
/// (v5.1 ping-pong's producer; consumers with warp-uniform descriptors, the O rescale under the
/// next S GEMM, and the P·V wait kept below the softmax by a control-flow boundary, so that the
/// softmax overlaps P·V: see notes-prefill.md, fifth pass) and its parts for comparison:
/// fa5_pack_early (the second call's fa5: P packed before the P·V wait, no boundary),
/// fa5_pack_after (no boundary, P packed after the wait: FlashAttention-3's order), fa5_uniform
/// (the uniform descriptors alone, v5.1's order), fa5_v51_order (uniform descriptors and the
/// boundary in v5.1's order), fa5_no_turns (fa5 without ping-pong's turns).
/// fa6 (sixth pass): fa5 with the row maxima as trees and ms / corr without branches (the same
/// bits); fa6_tree: the trees alone.
/// fa7_p16 / _p24 / _p32 (seventh pass): fa6 with 16, 24 or 32 of each thread's 64 exponentials a
/// tile on the FMA pipe (ex2_poly): other bits than fa6 (P within 8.8e-5), the same bits as
/// themselves whatever the batch, chunking or KV layout.
/// fa8 (seventh pass, second call): fa6 with FlashAttention-4's conditional rescaling (the kept
/// maximum moves only by more than 2^8, the O rescale skipped where no row of a warp moved it):
/// other bits than fa6, invariant as every kernel here. fa8_lean: fa8 on v6.1's lean producer.
/// fa6_lean: fa6's consumers (no skip) on v6.1's lean producer: fa6's bits.
/// fa9 (eighth pass): fa8 with the row sums on the tensor core (P against a ones matrix, 8
/// m64n8k16 beside each P·V, rescaled with O): other bits than fa8, invariant as every kernel here.
/// fa10 (ninth pass): fa8's consumers fed by v6's TMA producer (whole key tiles by
/// cp.async.bulk.tensor: one 128-row box a head_dim half for the naive layout and paged blocks of
/// >= 128 slots, one a block for 16-64; other block sizes run fa8): fa8's bits (the same smem).
/// fa11 (tenth pass): fa8's consumers, the producer deciding per key tile: two 128-row TMA boxes
/// where the tile's 128 slots are consecutive in the arena, else fa8's cp.async gather: fa8's bits.
/// fa11_vote: the same, decided per tile by a vote of each producer warp (call 1 of the pass).
enum class WsVariant {
  ws, pingpong, tma, lean, persist, fa5, fa5_pack_early, fa5_pack_after, fa5_uniform, fa5_v51_order, fa5_no_turns, fa6, fa6_tree,
  fa7_p16, fa7_p24, fa7_p32, fa8, fa8_lean, fa6_lean, fa9, fa10, fa11, fa11_vote
};
/// Launches the warp-specialized kernel v on grid blocks: fa8, fa10 and fa11 (the production
/// kernels, attention_prefill_wgmma_ws.cu); any other variant throws std::invalid_argument (those
/// are kernels/scratch/'s launch_ws_scratch).
void launch_ws(const Params& p, int grid, WsVariant v, ScalarType dtype, cudaStream_t stream);
/// The checks (GQA grouping, prefill_wgmma_supported) and the kernel parameters of a, with the grid
/// (an upper bound of the 128-row tiles, per KV head); throws std::invalid_argument.
Params make_params(const PrefillAttentionArgs& a, int64_t& grid);
/// make_params then launch_ws; nothing for an empty batch.
void run_ws(const PrefillAttentionArgs& a, WsVariant v, cudaStream_t stream);

}  // namespace servelab::kernels::prefill_wgmma
