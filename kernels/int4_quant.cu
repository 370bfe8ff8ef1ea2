// INT4 quantize-on-load and dequantization (int4_quant.h). Quantization: one thread per (row,
// group), consecutive threads taking consecutive groups of a row; it runs once at load.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/int4_quant.h"

namespace servelab::kernels {
namespace int4_quant_detail {  // named: the kernels library may be compiled as unity batches

__global__ void quantize_kernel(const __nv_bfloat16* w, int64_t rows, int cols, int group, bool symmetric,
                                uint8_t* codes, float* scales, float* zeros) {
  const int groups = cols / group;
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= rows * groups) return;
  const int64_t r = idx / groups;
  const int g = int(idx % groups);
  const __nv_bfloat16* x = w + r * cols + int64_t(g) * group;
  float lo = 0.0f, hi = 0.0f;  // the range includes 0, as quantize_int4's
  for (int i = 0; i < group; ++i) {
    const float v = __bfloat162float(x[i]);
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
  }
  float scale;
  int zero;
  if (symmetric) {
    const float amax = fmaxf(-lo, hi);
    scale = __half2float(__float2half_rn(amax > 0.0f ? 2.0f * amax / 15.0f : 1.0f));
    zero = 8;
  } else {
    scale = __half2float(__float2half_rn(fmaxf(hi - lo, 1e-5f) / 15.0f));
    zero = min(max(int(-rintf(lo / scale)), 0), 15);
  }
  scales[int64_t(g) * rows + r] = scale;
  zeros[int64_t(g) * rows + r] = float(zero);
  uint8_t* out = codes + r * (cols / 2) + int64_t(g) * (group / 2);
  for (int i = 0; i < group; i += 2) {
    const int q0 = min(max(int(rintf(__bfloat162float(x[i]) / scale)) + zero, 0), 15);
    const int q1 = min(max(int(rintf(__bfloat162float(x[i + 1]) / scale)) + zero, 0), 15);
    out[i / 2] = uint8_t(q0 | (q1 << 4));
  }
}

/// One thread per code byte (two weights), grid-stride.
__global__ void dequantize_kernel(const uint8_t* codes, const float* scales, const float* zeros, int64_t rows, int cols,
                                  int group, __nv_bfloat162* out) {
  const int64_t n = rows * (cols / 2);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / (cols / 2);
    const int c = int(i % (cols / 2)) * 2;
    const int64_t gi = int64_t(c / group) * rows + r;
    const float s = scales[gi], z = zeros[gi];
    const uint8_t b = codes[i];
    out[i] = __floats2bfloat162_rn((float(b & 0xf) - z) * s, (float(b >> 4) - z) * s);
  }
}

/// One thread per output element, grid-stride; a block's threads take consecutive columns of a row
/// (the stores coalesce, the loads follow perm).
__global__ void gather_columns_kernel(const uint16_t* x, const int32_t* perm, uint16_t* out, int rows, int cols) {
  const int64_t n = int64_t(rows) * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    out[i] = x[r * cols + __ldg(perm + (i - r * cols))];
  }
}

}  // namespace int4_quant_detail

void gather_columns(const void* x, const int32_t* perm, void* out, int rows, int cols, cudaStream_t stream) {
  if (rows < 0 || cols < 1) throw std::invalid_argument("gather_columns: " + std::to_string(rows) + " rows of " +
                                                        std::to_string(cols) + " columns");
  if (rows == 0) return;
  const int64_t n = int64_t(rows) * cols;
  const int blocks = int(std::min<int64_t>((n + 255) / 256, 132 * 16));
  int4_quant_detail::gather_columns_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint16_t*>(x), perm,
                                                                        static_cast<uint16_t*>(out), rows, cols);
  CUDA_CHECK_LAUNCH();
}

void quantize_int4_weight(const void* w, int64_t rows, int cols, int group, bool symmetric, uint8_t* codes,
                          float* scales, float* zeros) {
  if (rows < 1 || group < 2 || group % 2 || cols < group || cols % group)
    throw std::invalid_argument("quantize_int4_weight: [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                "] with group " + std::to_string(group) +
                                ": cols must be a positive multiple of the group, the group even");
  const int64_t threads = rows * (cols / group);
  int4_quant_detail::quantize_kernel<<<unsigned((threads + 255) / 256), 256>>>(
      static_cast<const __nv_bfloat16*>(w), rows, cols, group, symmetric, codes, scales, zeros);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
}

void dequantize_int4(const uint8_t* codes, const float* scales, const float* zeros, int64_t rows, int cols, int group,
                     void* out, cudaStream_t stream) {
  if (rows < 1 || group < 2 || cols % group || group % 2)
    throw std::invalid_argument("dequantize_int4: cols (" + std::to_string(cols) + ") must be a multiple of group (" +
                                std::to_string(group) + ")");
  const int64_t n = rows * (cols / 2);
  const int blocks = int(std::min<int64_t>((n + 255) / 256, 132 * 16));
  int4_quant_detail::dequantize_kernel<<<blocks, 256, 0, stream>>>(codes, scales, zeros, rows, cols, group,
                                                                    static_cast<__nv_bfloat162*>(out));
  CUDA_CHECK_LAUNCH();
}

}  // namespace servelab::kernels
