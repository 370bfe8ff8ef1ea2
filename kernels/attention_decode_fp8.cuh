#pragma once
// What the two FP8-KV decode kernels share (attention_decode_fp8.cu: CUDA cores;
// attention_decode_fp8_mma.cu: tensor cores): the arena layout handed to the kernels, and the
// tensor-core kernel's launcher (decode_attention_fp8 builds the Params and the split).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_decode_common.cuh"

namespace servelab::kernels::decode_fp8 {

struct Fp8Layout {
  int64_t slot_bytes;  // fp8_kv_slot_bytes
  int64_t scales_at;   // fp8_kv_scales_offset
};

/// 16-position steps per warp per pass of the tensor-core kernel (Fp8KvDecode::mma: 4, mma2: 2).
constexpr int kMmaStepsWide = 4, kMmaStepsNarrow = 2;

/// The tensor-core FP8 decode kernel (head_dim 64 or 128, any group: up to 8 query heads a block,
/// p.n_sub = ceil(group / 8)) with `steps` 16-position steps per warp per pass.
void launch_decode_fp8_mma(ScalarType dtype, int head_dim, int steps, const decode::Params& p, const Fp8Layout& f,
                           dim3 grid, cudaStream_t stream);

}  // namespace servelab::kernels::decode_fp8
