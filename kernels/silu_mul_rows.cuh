#pragma once
// The grid-stride loop of SiLU·mul over the merged gate|up rows, in 16-byte vectors: out[r, c] =
// silu(gate) · up, with (kDelta) an adapter row's gate|up LoRA delta added first (row_slot[r] >= 0).
// Shared by kernels::silu_mul (elementwise.cu) and kernels::lora_silu_mul (lora_act.cu).
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/silu.cuh"

namespace servelab::kernels {

template <typename T, bool kDelta>
__device__ __forceinline__ void silu_mul_rows(const T* gate_up, const T* delta, const int32_t* row_slot, T* out,
                                              int ffn, int64_t n_vec) {
  const int vpr = ffn / 8;  // vectors per output row
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < n_vec; v += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = v / vpr, c = (v % vpr) * 8;
    float g[8], u[8];
    unpack8<T>(*reinterpret_cast<const Vec8*>(gate_up + r * 2 * ffn + c), g);
    unpack8<T>(*reinterpret_cast<const Vec8*>(gate_up + r * 2 * ffn + ffn + c), u);
    if constexpr (kDelta) {
      if (row_slot[r] >= 0) {
        float dg[8], du[8];
        unpack8<T>(*reinterpret_cast<const Vec8*>(delta + r * 2 * ffn + c), dg);
        unpack8<T>(*reinterpret_cast<const Vec8*>(delta + r * 2 * ffn + ffn + c), du);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          g[j] += dg[j];
          u[j] += du[j];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] = silu_mul_f(g[j], u[j]);
    *reinterpret_cast<Vec8*>(out + r * ffn + c) = pack8<T>(g);
  }
}

}  // namespace servelab::kernels
