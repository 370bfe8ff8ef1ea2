#pragma once
// Device side of kernels/lora_delta.h: a row's LoRA delta (r FMAs a column from the row's xa and
// B's contiguous max_rank values of that column), staged by the consumer's block in shared memory
// before its own per-vector work, B read in order by the warp (lora_xa_stage). (A first version had each thread compute
// its own 8 columns, reading 8 · max_rank values of B 16 bytes at a time: the warp's loads 256
// bytes apart, 32 lines an instruction; on the H200 that made rope_kv_write and SiLU·mul about
// 90 µs a layer slower at batch 32: docs/lora.md "GPU figures".) Vectors of 8 columns never
// straddle a segment end (the ends are multiples of 8: lora_xa_delta_check).
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/lora_delta.h"

namespace servelab::kernels {

/// delta(row, col) for one column: Σ_k xa[m · max_rank + k] · B[slot, col, k] (m: col's segment);
/// xa_row: the row's xa, b_slot: B of the row's slot. The column's max_rank values of B are
/// contiguous, so consecutive threads on consecutive columns read consecutive bytes (the
/// consumers stage a block's deltas this way in shared memory: lora_xa_stage): 16 bytes at a time
/// when max_rank % 8 == 0.
template <typename T>
__device__ __forceinline__ float lora_xa_column(const LoraXaDelta& d, const float* xa_row, const T* b_slot, int col) {
  const int m = (col >= d.seg_end0) + (col >= d.seg_end1);
  const float* xa = xa_row + m * d.max_rank;
  const T* b = b_slot + int64_t(col) * d.max_rank;
  float acc = 0.0f;
  if (d.max_rank % 8 == 0) {
#pragma unroll 2
    for (int k = 0; k < d.max_rank; k += 8) {
      float bf[8];
      unpack8<T>(*reinterpret_cast<const Vec8*>(b + k), bf);
      const float4 x0 = *reinterpret_cast<const float4*>(xa + k), x1 = *reinterpret_cast<const float4*>(xa + k + 4);
      acc += x0.x * bf[0] + x0.y * bf[1] + x0.z * bf[2] + x0.w * bf[3] + x1.x * bf[4] + x1.y * bf[5] + x1.z * bf[6] +
             x1.w * bf[7];
    }
  } else {
    for (int k = 0; k < d.max_rank; ++k) acc += xa[k] * to_float<T>(b[k]);
  }
  return acc;
}

/// The block's staging of a row's deltas: out[q] = delta(row, column_of(q)) for q < n (a column
/// < 0: out[q] not written), then a barrier. Called by every thread of the block (blockDim.x a
/// multiple of 32). When max_rank / 8 is a power of two (8 to 128), max_rank / 8 lanes share a
/// column, each 8 of its ranks (one 16-byte load of B), summed by shuffles: a warp's loads are 512
/// consecutive bytes of B for columns in order. Otherwise a column per thread (lora_xa_column).
template <typename T, class ColumnOf>
__device__ __forceinline__ void lora_xa_stage(const LoraXaDelta& d, int64_t row, int s, int n, ColumnOf column_of,
                                              float* out) {
  const float* xa_row = d.xa + row * d.total;
  const T* b_slot = static_cast<const T*>(d.b) + int64_t(s) * d.n_out * d.max_rank;
  const int lanes = d.max_rank / 8;  // lanes a column
  if (d.max_rank % 8 == 0 && (lanes & (lanes - 1)) == 0) {
    const int per_pass = int(blockDim.x) / lanes, part = int(threadIdx.x) % lanes;
    for (int q0 = 0; q0 < n; q0 += per_pass) {  // uniform over the block: every lane shuffles
      const int q = q0 + int(threadIdx.x) / lanes;
      const int col = q < n ? column_of(q) : -1;
      float acc = 0.0f;
      if (col >= 0) {
        const int m = (col >= d.seg_end0) + (col >= d.seg_end1), k = 8 * part;
        const float* xa = xa_row + m * d.max_rank + k;
        float bf[8];
        unpack8<T>(*reinterpret_cast<const Vec8*>(b_slot + int64_t(col) * d.max_rank + k), bf);
        const float4 x0 = *reinterpret_cast<const float4*>(xa), x1 = *reinterpret_cast<const float4*>(xa + 4);
        acc = x0.x * bf[0] + x0.y * bf[1] + x0.z * bf[2] + x0.w * bf[3] + x1.x * bf[4] + x1.y * bf[5] + x1.z * bf[6] +
              x1.w * bf[7];
      }
      for (int o = 1; o < lanes; o *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (col >= 0 && part == 0) out[q] = acc;
    }
  } else {
    for (int q = threadIdx.x; q < n; q += blockDim.x) {
      const int col = column_of(q);
      if (col >= 0) out[q] = lora_xa_column<T>(d, xa_row, b_slot, col);
    }
  }
  __syncthreads();
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
