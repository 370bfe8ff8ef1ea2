#pragma once
// Device side of kernels/lora_delta.h: the LoRA delta of 8 consecutive output columns of one row,
// from the row's xa and B (r FMAs a column, B's 8 · max_rank values contiguous, read 16 bytes at a
// time when max_rank % 8 == 0). Column vectors never straddle a segment end (the ends are
// multiples of 8: lora_xa_delta_check).
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/lora_delta.h"

namespace servelab::kernels {

/// f[j] += delta(row, c + j) for j < 8, the row's slot s >= 0.
template <typename T>
__device__ __forceinline__ void lora_xa_add8(const LoraXaDelta& d, int64_t row, int s, int c, float (&f)[8]) {
  const int m = (c >= d.seg_end0) + (c >= d.seg_end1);
  const float* xa = d.xa + row * d.total + m * d.max_rank;
  const T* b = static_cast<const T*>(d.b) + (int64_t(s) * d.n_out + c) * d.max_rank;
  float acc[8] = {};
  if (d.max_rank % 8 == 0) {
    for (int k = 0; k < d.max_rank; k += 8) {
      const float4 x0 = *reinterpret_cast<const float4*>(xa + k), x1 = *reinterpret_cast<const float4*>(xa + k + 4);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float bf[8];
        unpack8<T>(*reinterpret_cast<const Vec8*>(b + j * d.max_rank + k), bf);
        acc[j] += x0.x * bf[0] + x0.y * bf[1] + x0.z * bf[2] + x0.w * bf[3] + x1.x * bf[4] + x1.y * bf[5] +
                  x1.z * bf[6] + x1.w * bf[7];
      }
    }
  } else {
    for (int k = 0; k < d.max_rank; ++k) {
      const float xk = xa[k];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += xk * to_float<T>(b[j * d.max_rank + k]);
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) f[j] += acc[j];
}

/// Throws std::invalid_argument naming `who` unless the delta's widths fit the consumers' 8-column vectors.
inline void lora_xa_delta_check(const LoraXaDelta& d, const char* who) {
  if (d.xa == nullptr) return;
  if (d.row_slot == nullptr || d.b == nullptr)
    throw std::invalid_argument(std::string(who) + ": a LoRA xa delta needs row_slot and B");
  if (d.max_rank < 1 || d.max_rank > kLoraMaxRank || d.total < d.max_rank || d.total % d.max_rank != 0)
    throw std::invalid_argument(std::string(who) + ": LoRA delta rank " + std::to_string(d.max_rank) + " / total " +
                                std::to_string(d.total) + " outside the kernels' limits");
  if (d.n_out % 8 != 0 || d.seg_end0 % 8 != 0 || d.seg_end1 % 8 != 0)
    throw std::invalid_argument(std::string(who) + ": LoRA delta widths and segment ends must be multiples of 8");
}

}  // namespace servelab::kernels
