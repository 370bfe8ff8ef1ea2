#pragma once
// engine_bench --lora (bench/engine_bench_lora.cpp): what multi-LoRA costs the cuda backend on a
// real model shape, against the same backend's steps without adapters (issue 31).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_figure.h"

namespace servelab::bench {

/// One figure, as engine_bench records them: value in unit, ratio against `peer` (the base).
struct LoraBenchOptions {
  std::string preset = "llama2-7b";
  int rank = 16;        ///< every adapter's rank (all seven linears of every layer)
  int max_loras = 64;   ///< device slots
  bool quick = false;   ///< fewer points and steps
  /// --lora-prefill: only the prefill and mixed steps, each also with the backend's shrinks or
  /// expands left out (LoraSgmvConfig::skip_runs and skip_grouped, diagnostic) and every launch in
  /// line (no side stream).
  bool prefill_only = false;
  /// --lora-sm-sweep: only the eager steps under each SM reserve (LoraSgmvConfig::product_sm_reserve).
  bool sm_sweep = false;
  uint64_t seed = 1;
  /// --ncu-decode B,CTX with --lora: profile_lora_decode_step's point, its distinct adapters
  /// (--lora-adapters K, 0: none, the base step) and launch variant (--variants NAME, one of
  /// run_lora_bench's decode variants; empty: the default).
  int ncu_batch = 0, ncu_context = 512, ncu_adapters = 0;
  std::string ncu_variant;
};

/// Runs the LoRA figures on device 0, printing a line per figure:
/// - lora_miss_ms: Backend::load_lora of one adapter (pack to 16 bits + host->device copy), and
///   the pinned copy alone of the same bytes;
/// - lora_decode_step: decode steps at batch 32 and 64 (context 512) with k distinct adapters
///   among the rows (row r takes slot r mod k) against none (ratio = base step / step), measured
///   under each launch variant of the grouped kernels (kernels::LoraSgmvConfig) as
///   lora_decode_variant, with each variant's mean ratio (lora_decode_variant_mean); the variant
///   of the best mean (diagnostic variants, whose results are wrong, excluded) is kept for the
///   figures after it and its steps are repeated as lora_decode_step;
/// - lora_prefill_step: prefills of n sequences of `len` tokens over k adapters (1 x 512 / 1,
///   4 x 512 / 4, 4 x 512 / 1, 8 x 256 / 8, 16 x 64 / 16) against none (the resident-adapter
///   TTFT's step), each with the runs on the grouped CUDA-core kernels (`sgmv`), on the tensor
///   cores by the default (`gemm`: runs of >= 64 rows, at most 8) and with every run of >= 16
///   rows there (`gemm all`: at most 64 runs);
/// - lora_mixed_step: one prompt of 128 / 256 / 512 tokens beside 4 or 8 decodes of context 256
///   (a serving run's prefill step), every sequence on its own adapter, against none, beside the
///   prompt alone and the prompt on its adapter with the decodes on none, under the default and
///   the variants before it (LoraSgmvConfig::mixed_grouped_beside, size_by_plan_rows off), in
///   line, the grouped launches with no rows (diagnostic) and the grouped kernels for every row;
/// - lora_zipf_decode: closed-loop decode at batch 64 where each finished sequence (output
///   lengths uniform in [64, 192]) is replaced by one whose adapter is drawn from Zipf(s = 1) over
///   8, 64 or 512 adapters, slots taken least-recently-used (a miss = load_lora, timed with the
///   step), against the same loop without adapters: tokens/s and the ratio.
std::vector<BenchFigure> run_lora_bench(const LoraBenchOptions& options);

/// One decode step (CUDA graph replay) of ncu_batch rows at ncu_context with ncu_adapters distinct
/// adapters (row r: slot r mod k) between cudaProfilerStart and Stop, for
/// `ncu --profile-from-start off` (scripts/gpu-lora-check.sh NCU=1); prints the step's median
/// time outside the profiler first. Returns 0, or 2 for an unknown variant.
int profile_lora_decode_step(const LoraBenchOptions& options);

}  // namespace servelab::bench
