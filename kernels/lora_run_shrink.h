#pragma once
// The shrink of a run of rows of one adapter (kernels/lora_runs.h), a prefill's or a chunk's
// sequence, as one small tensor-core kernel instead of a cuBLASLt GEMM (LoraGemm::shrink):
//   xa[run.first + i, :total] = scale · x[run.first + i, :n_in] · A[run.slot]ᵀ   (16-bit xa)
// mma.sync m16n8k16 over 16-row tiles, K split across blocks so a short prompt still spreads over
// the GPU (fp32 partial sums; the last block of each row tile adds them in a fixed order, so the
// result does not depend on which block finishes last). Its point is latency: the whole product
// moves a few MB, and cuBLASLt's launch for it cost ~6-8 µs on an H200 beside a prefill's
// product (bench/kernels/lora_parts_bench.cu). Reference: kernels/ref/lora_ref.h (lora_shrink_ref).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/lora.h"
#include "kernels/lora_runs.h"

namespace servelab::kernels {

/// Whether lora_run_shrink takes this pool: total_rank() in {16, 32, 48, 64} and n_in % 16 == 0.
bool lora_run_shrink_supported(const LoraPool& pool);
/// The scratch lora_run_shrink needs for `rows` rows of `pool`: fp32 partial sums, and row-tile
/// counters (int32, zeroed once by the caller; every launch leaves them zero).
size_t lora_run_shrink_partial_floats(const LoraPool& pool, int rows);
int lora_run_shrink_counters(int rows);

/// xa (16-bit, row stride pool.total_rank()) for the run's rows, as LoraGemm::shrink writes it.
/// partial and counters: sized by the two functions above for at least run.count rows, used by
/// one stream at a time. Throws std::invalid_argument for a pool it does not take or a bad run.
void lora_run_shrink(ScalarType t, const void* x, const LoraPool& pool, const LoraRun& run, float scale, void* xa,
                     float* partial, int32_t* counters, cudaStream_t stream);

}  // namespace servelab::kernels
