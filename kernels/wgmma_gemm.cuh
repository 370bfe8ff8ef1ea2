#pragma once
// Hopper wgmma wrappers of the fused LoRA GEMM (lora_fused_gemm.cu): m64nNk16 with fp32
// accumulators, A and B from shared memory by descriptor (wgmma::desc_sw128), for the widths the
// product (n192, n256; n128 is attention_prefill_wgmma.cuh's mma_ss) and the shrink (n16 to n64) take;
// and the 2-D bulk tensor copy. Call only from code compiled for sm_90a (SERVELAB_WGMMA_DEVICE).
// The register lists are written out (inline asm takes no loops); the instruction and operand
// order are the PTX ISA's "wgmma.mma_async" with scale-a, scale-b 1 and no transposes (both
// operands K-major).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention_prefill_wgmma.cuh"

namespace servelab::kernels::wgmma {

// m64n16k16: d[8] (+)= A · B, both from shared memory by descriptor (scale_d 0: d = A · B).
#define SERVELAB_WGMMA_SS_N16(NAME, TY)          \
  __device__ __forceinline__ void NAME(float (&d)[8], uint64_t da, uint64_t db, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"  \
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32." TY "." TY " {"  \
                 "%0, %1, %2, %3, %4, %5, %6, %7"  \
                 "}, %8, %9, p, 1, 1, 0, 0;\n}\n"  \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])  \
                 : "l"(da), "l"(db), "r"(scale_d));  \
  }
SERVELAB_WGMMA_SS_N16(ss_n16_bf16, "bf16")
SERVELAB_WGMMA_SS_N16(ss_n16_f16, "f16")
#undef SERVELAB_WGMMA_SS_N16

// m64n32k16: d[16] (+)= A · B, both from shared memory by descriptor (scale_d 0: d = A · B).
#define SERVELAB_WGMMA_SS_N32(NAME, TY)          \
  __device__ __forceinline__ void NAME(float (&d)[16], uint64_t da, uint64_t db, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"  \
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " {"  \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"  \
                 "}, %16, %17, p, 1, 1, 0, 0;\n}\n"  \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),  \
                   "+f"(d[15])  \
                 : "l"(da), "l"(db), "r"(scale_d));  \
  }
SERVELAB_WGMMA_SS_N32(ss_n32_bf16, "bf16")
SERVELAB_WGMMA_SS_N32(ss_n32_f16, "f16")
#undef SERVELAB_WGMMA_SS_N32

// m64n256k16: d[128] (+)= A · B, both from shared memory by descriptor (scale_d 0: d = A · B).
#define SERVELAB_WGMMA_SS_N256(NAME, TY)          \
  __device__ __forceinline__ void NAME(float (&d)[128], uint64_t da, uint64_t db, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"  \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {"  \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19,"  \
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37,"  \
                 "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55,"  \
                 "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73,"  \
                 "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91,"  \
                 "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107,"  \
                 "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122,"  \
                 "%123, %124, %125, %126, %127"  \
                 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"  \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),  \
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
                   "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
                   "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
                   "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
                   "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
                   "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
                   "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
                   "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),  \
                   "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),  \
                   "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]),  \
                   "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),  \
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),  \
                   "+f"(d[127])  \
                 : "l"(da), "l"(db), "r"(scale_d));  \
  }
SERVELAB_WGMMA_SS_N256(ss_n256_bf16, "bf16")
SERVELAB_WGMMA_SS_N256(ss_n256_f16, "f16")
#undef SERVELAB_WGMMA_SS_N256

// m64n64k16: d[32] (+)= A · B, both from shared memory by descriptor (scale_d 0: d = A · B).
#define SERVELAB_WGMMA_SS_N64(NAME, TY)          \
  __device__ __forceinline__ void NAME(float (&d)[32], uint64_t da, uint64_t db, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"  \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {"  \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19,"  \
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"  \
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"  \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),  \
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31])  \
                 : "l"(da), "l"(db), "r"(scale_d));  \
  }
SERVELAB_WGMMA_SS_N64(ss_n64_bf16, "bf16")
SERVELAB_WGMMA_SS_N64(ss_n64_f16, "f16")
#undef SERVELAB_WGMMA_SS_N64

// m64n192k16: d[96] (+)= A · B, both from shared memory by descriptor (scale_d 0: d = A · B).
#define SERVELAB_WGMMA_SS_N192(NAME, TY)          \
  __device__ __forceinline__ void NAME(float (&d)[96], uint64_t da, uint64_t db, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"  \
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY " {"  \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19,"  \
                 "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37,"  \
                 "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55,"  \
                 "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73,"  \
                 "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91,"  \
                 "%92, %93, %94, %95"  \
                 "}, %96, %97, p, 1, 1, 0, 0;\n}\n"  \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),  \
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
                   "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
                   "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
                   "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
                   "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
                   "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
                   "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
                   "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])  \
                 : "l"(da), "l"(db), "r"(scale_d));  \
  }
SERVELAB_WGMMA_SS_N192(ss_n192_bf16, "bf16")
SERVELAB_WGMMA_SS_N192(ss_n192_f16, "f16")
#undef SERVELAB_WGMMA_SS_N192

/// d (64 x N) (+)= A (64 x 16) · B (16 x N): N = 16, 32, 64, 128, 192 or 256 (d holds N / 2 floats).
template <int N, typename T>
__device__ __forceinline__ void mma_n(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  constexpr bool bf = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (N == 16) bf ? ss_n16_bf16(d, da, db, scale_d) : ss_n16_f16(d, da, db, scale_d);
  else if constexpr (N == 32) bf ? ss_n32_bf16(d, da, db, scale_d) : ss_n32_f16(d, da, db, scale_d);
  else if constexpr (N == 64) bf ? ss_n64_bf16(d, da, db, scale_d) : ss_n64_f16(d, da, db, scale_d);
  else if constexpr (N == 128) mma_ss<T>(d, da, db, scale_d);
  else if constexpr (N == 192) bf ? ss_n192_bf16(d, da, db, scale_d) : ss_n192_f16(d, da, db, scale_d);
  else bf ? ss_n256_bf16(d, da, db, scale_d) : ss_n256_f16(d, da, db, scale_d);
}

/// TMA: the box of a 2-D tensor map at (c0 inner, c1 outer) into shared dst, completing its bytes
/// on the mbarrier bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

}  // namespace servelab::kernels::wgmma
