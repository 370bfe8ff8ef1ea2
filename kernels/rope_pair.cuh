#pragma once
// RoPE's rotate-half step on one pair (i, i + head_dim / 2) of a head, shared by the RoPE/KV-write
// kernels (rope_kv.cu) and the q|k|v gemv that applies RoPE in its epilogue (gemv_rope_kv.cuh):
// the same expression in both, so both round the same way and give the same bits.
#include <cuda_runtime.h>

namespace servelab::kernels {

/// (x, y) rotated by the angle whose cosine and sine are (cs, sn): x' = x cs − y sn, y' = y cs + x sn.
__device__ __forceinline__ void rope_rotate(float x, float y, float cs, float sn, float& rx, float& ry) {
  rx = x * cs - y * sn;
  ry = y * cs + x * sn;
}

}  // namespace servelab::kernels
