// pack_int4_fragments (int4_quant.h): INT4 codes, scales and zeros in quant_gemv's row layout
// repacked into int4_pack.h's fragment order, once at load. One thread per packed 32-bit word,
// gathering its 8 nibbles by int4_pack::nibble_source; one thread per 16-byte group record.
// dequantize_int4_packed: the way back to a bf16 matrix, for products of more rows than quant_gemv
// takes (the cuda backend keeps only the packed layout of an INT4 model).
#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/int4_pack.h"
#include "kernels/int4_quant.h"

namespace servelab::kernels {
namespace int4_pack_detail {  // named: the kernels library may be compiled as unity batches

using namespace int4_pack;

__global__ void pack_codes_kernel(const uint8_t* codes, int n, int k, const Layout lay, uint32_t* out) {
  const int64_t words = lay.code_bytes() / 4;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < words; i += int64_t(gridDim.x) * blockDim.x) {
    const int j = int(i % 4), lane = int(i / 4 % 32);
    const int64_t chunk_index = i / 128;  // tile * chunks + chunk
    const int tile = int(chunk_index / lay.chunks()), chunk = int(chunk_index % lay.chunks());
    uint32_t word = 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      int r, kc;
      nibble_source(lane, j, e, r, kc);
      const int row = tile * kTileRows + r, col = chunk * kChunkK + kc;
      if (row < n) word |= uint32_t((codes[int64_t(row) * (k / 2) + col / 2] >> (4 * (col & 1))) & 0xF) << (4 * e);
    }
    out[i] = word;
  }
}

__device__ __forceinline__ uint32_t bf16_pair(float v) {
  const __nv_bfloat162 p = __float2bfloat162_rn(v);
  return *reinterpret_cast<const uint32_t*>(&p);
}

__global__ void pack_groups_kernel(const float* scales, const float* zeros, int n, const Layout lay, uint4* out) {
  const int64_t records = int64_t(lay.tiles()) * lay.groups() * 8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < records; i += int64_t(gridDim.x) * blockDim.x) {
    const int g = int(i % 8), group = int(i / 8 % lay.groups()), tile = int(i / 8 / lay.groups());
    const int r0 = tile * kTileRows + g, r1 = r0 + 8;
    const float s0 = r0 < n ? scales[int64_t(group) * n + r0] : 0.0f, s1 = r1 < n ? scales[int64_t(group) * n + r1] : 0.0f;
    const float z0 = r0 < n ? zeros[int64_t(group) * n + r0] : 0.0f, z1 = r1 < n ? zeros[int64_t(group) * n + r1] : 0.0f;
    out[i] = make_uint4(__float_as_uint(s0), __float_as_uint(s1), bf16_pair(128.0f + z0), bf16_pair(128.0f + z1));
  }
}

/// Thread per packed word: its 8 values (q − zero) · scale as bf16 at their (row, k) of out.
__global__ void dequantize_packed_kernel(const uint32_t* codes, const uint4* groups, int n, int k, const Layout lay,
                                         __nv_bfloat16* out) {
  const int64_t words = lay.code_bytes() / 4;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < words; i += int64_t(gridDim.x) * blockDim.x) {
    const int j = int(i % 4), lane = int(i / 4 % 32);
    const int64_t chunk_index = i / 128;
    const int tile = int(chunk_index / lay.chunks()), chunk = int(chunk_index % lay.chunks());
    const uint32_t w = codes[i];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      int r, kc;
      nibble_source(lane, j, e, r, kc);
      const int row = tile * kTileRows + r, col = chunk * kChunkK + kc;
      if (row >= n) continue;
      const uint4 rec = groups[(int64_t(tile) * lay.groups() + col / lay.group_size) * 8 + r % 8];
      const uint32_t zb = (r < 8 ? rec.z : rec.w) & 0xFFFFu;
      const float zero = __uint_as_float(zb << 16) - 128.0f, scale = __uint_as_float(r < 8 ? rec.x : rec.y);
      out[int64_t(row) * k + col] = __float2bfloat16_rn((float((w >> (4 * e)) & 0xF) - zero) * scale);
    }
  }
}

}  // namespace int4_pack_detail

void pack_int4_fragments(const uint8_t* codes, const float* scales, const float* zeros, int n, int k, int group_size,
                         uint8_t* packed_codes, void* packed_groups, cudaStream_t stream) {
  const int4_pack::Layout lay{n, k, group_size};
  if (!lay.packable())
    throw std::invalid_argument("pack_int4_fragments: [" + std::to_string(n) + ", " + std::to_string(k) + "] with group " +
                                std::to_string(group_size) + ": k and the group must be multiples of 128, the group dividing k");
  if (reinterpret_cast<uintptr_t>(packed_codes) % 16 || reinterpret_cast<uintptr_t>(packed_groups) % 16)
    throw std::invalid_argument("pack_int4_fragments: the packed buffers must be 16-byte aligned");
  const auto blocks = [](int64_t items) { return unsigned(std::min<int64_t>((items + 255) / 256, 132 * 32)); };
  int4_pack_detail::pack_codes_kernel<<<blocks(lay.code_bytes() / 4), 256, 0, stream>>>(
      codes, n, k, lay, reinterpret_cast<uint32_t*>(packed_codes));
  CUDA_CHECK_LAUNCH();
  int4_pack_detail::pack_groups_kernel<<<blocks(lay.group_bytes() / 16), 256, 0, stream>>>(
      scales, zeros, n, lay, static_cast<uint4*>(packed_groups));
  CUDA_CHECK_LAUNCH();
}

void dequantize_int4_packed(const uint8_t* packed_codes, const void* packed_groups, int n, int k, int group_size,
                            void* out, cudaStream_t stream) {
  const int4_pack::Layout lay{n, k, group_size};
  if (!lay.packable())
    throw std::invalid_argument("dequantize_int4_packed: [" + std::to_string(n) + ", " + std::to_string(k) +
                                "] with group " + std::to_string(group_size) + " is not packable");
  const int64_t words = lay.code_bytes() / 4;
  int4_pack_detail::dequantize_packed_kernel<<<unsigned(std::min<int64_t>((words + 255) / 256, 132 * 32)), 256, 0, stream>>>(
      reinterpret_cast<const uint32_t*>(packed_codes), static_cast<const uint4*>(packed_groups), n, k, lay,
      static_cast<__nv_bfloat16*>(out));
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
