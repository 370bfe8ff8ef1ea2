#pragma once
// What the two FP8-KV decode kernels share (attention_decode_fp8.cu: CUDA cores;
// attention_decode_fp8_mma.cu: tensor cores): the arena layout handed to the kernels, and the
// tensor-core kernel's launcher (decode_attention_fp8 builds the Params and the split).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_decode_common.cuh"
#include "kernels/kv_fp8.h"

namespace servelab::kernels::decode_fp8 {

/// The arena layout handed to the kernels (kv_fp8.h: pages of 16 slots split by KV head).
using Fp8Layout = Fp8KvLayout;

/// 16-position steps per warp per pass of the tensor-core kernel (Fp8KvDecode::mma: 4, mma2: 2).
constexpr int kMmaStepsWide = 4, kMmaStepsNarrow = 2;

/// The tensor-core FP8 decode kernel (head_dim 64 or 128, any group: up to 8 query heads a block,
/// p.n_sub = ceil(group / 8)) with `steps` 16-position steps per warp per pass.
void launch_decode_fp8_mma(ScalarType dtype, int head_dim, int steps, const decode::Params& p, const Fp8Layout& f,
                           dim3 grid, cudaStream_t stream);
/// The same arithmetic with the codes and scales staged through shared memory by cp.async, a ring
/// of one-step stages a warp, as many as fit blocks_per_sm (2, 3 or 4) blocks an SM
/// (Fp8KvDecode::mma_async*; attention_decode_fp8_async.cu).
/// f16: the codes become f16 operands by cvt (mma_async4f) rather than bf16 by masks and shifts.
/// bulk (f16, 4 blocks an SM, head_dim 128: mma_bulk): each stage filled by two bulk copies, a
/// step's K and V runs of a whole 16-aligned page (the caller's condition).
void launch_decode_fp8_async(ScalarType dtype, int head_dim, int blocks_per_sm, bool f16, bool bulk, const decode::Params& p,
                             const Fp8Layout& f, dim3 grid, cudaStream_t stream);

/// The same arithmetic as the f16 ring with each step's codes and scales loaded into registers 2
/// steps ahead, 2 blocks an SM (mma_regs; attention_decode_fp8_regs.cu), head_dim 128, every step a
/// whole 16-aligned page (the caller's condition).
void launch_decode_fp8_regs(ScalarType dtype, int head_dim, const decode::Params& p, const Fp8Layout& f, dim3 grid,
                            cudaStream_t stream);

/// Codes in bytes 0 and 2 of w as a bf16 pair (byte 0 in the low half), each value · 2^-120: the
/// code's sign to bit 15, its 7 magnitude bits to 10..4 (bf16's exponent bias 127 against E4M3's
/// 7; subnormal codes land on bf16 subnormals).
__device__ __forceinline__ uint32_t e4m3_lo_pair(uint32_t w) { return ((w << 4) & 0x07f007f0u) | ((w << 8) & 0x80008000u); }
/// Codes in bytes 1 and 3 of w as a bf16 pair (byte 1 in the low half), each value · 2^-120.
__device__ __forceinline__ uint32_t e4m3_hi_pair(uint32_t w) { return ((w >> 4) & 0x07f007f0u) | (w & 0x80008000u); }

/// Codes in bytes 0 and 1 of w (kHigh: 2 and 3) as an f16 pair (the lower byte in the low half),
/// exact: one cvt.rn.f16x2.e4m3x2 (sm_89 and later); elsewhere the same bits by masks and shifts,
/// then · 256 (value · 2^-8 before it: f16's exponent bias 15 against E4M3's 7).
template <bool kHigh>
__device__ __forceinline__ uint32_t e4m3x2_f16x2(uint32_t w) {
  uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (kHigh) asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, h;\n}" : "=r"(r) : "r"(w));
  else asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, l;\n}" : "=r"(r) : "r"(w));
#else
  const uint32_t x = kHigh ? w >> 16 : w & 0xffffu;
  const uint32_t b = (x & 0xffu) | ((x & 0xff00u) << 8);  // byte k of the pair in half k
  r = ((b << 8) & 0x80008000u) | ((b << 7) & 0x3f803f80u);
  __half2 h = *reinterpret_cast<__half2*>(&r);
  h = __hmul2(h, __float2half2_rn(256.0f));
  r = *reinterpret_cast<uint32_t*>(&h);
#endif
  return r;
}

}  // namespace servelab::kernels::decode_fp8
