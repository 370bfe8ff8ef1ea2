#pragma once
// engine_bench --lora (bench/engine_bench_lora.cpp): what multi-LoRA costs the cuda backend on a
// real model shape, against the same backend's steps without adapters (issue 31).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace servelab::bench {

/// One figure, as engine_bench records them: value in unit, ratio against `peer` (the base).
struct LoraFigure {
  std::string name, shape, unit, peer;
  double value = 0;
  std::optional<double> ratio;
};

struct LoraBenchOptions {
  std::string preset = "llama2-7b";
  int rank = 16;        ///< every adapter's rank (all seven linears of every layer)
  int max_loras = 64;   ///< device slots
  bool quick = false;   ///< fewer points and steps
  uint64_t seed = 1;
};

/// Runs the LoRA figures on device 0, printing a line per figure:
/// - lora_miss_ms: Backend::load_lora of one adapter (pack to 16 bits + host->device copy), and
///   the pinned copy alone of the same bytes;
/// - lora_decode_step: decode steps at batch 32 and 64 (context 512) with k distinct adapters
///   among the rows (row r takes slot r mod k) against none (ratio = base step / step), measured
///   under each launch variant of the grouped kernels (kernels::LoraSgmvConfig) as
///   lora_decode_variant, with each variant's mean ratio (lora_decode_variant_mean); the variant
///   of the best mean is kept for the figures after it and its steps are repeated as
///   lora_decode_step;
/// - lora_prefill_step: a 512-token prefill of one sequence with an adapter, and 4 sequences of
///   512 with 4 adapters, against none (the resident-adapter TTFT's step);
/// - lora_zipf_decode: closed-loop decode at batch 64 where each finished sequence (output
///   lengths uniform in [64, 192]) is replaced by one whose adapter is drawn from Zipf(s = 1) over
///   8, 64 or 512 adapters, slots taken least-recently-used (a miss = load_lora, timed with the
///   step), against the same loop without adapters: tokens/s and the ratio.
std::vector<LoraFigure> run_lora_bench(const LoraBenchOptions& options);

}  // namespace servelab::bench
