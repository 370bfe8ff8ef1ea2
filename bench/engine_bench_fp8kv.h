#pragma once
// engine_bench --kv-cache-dtype (bench/engine_bench_fp8kv.cpp): the cuda backend's decode and
// prefill steps with an FP8 KV cache beside bf16 KV on a real model shape (issue 26).
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_figure.h"

namespace servelab::bench {

struct Fp8KvBenchOptions {
  std::string preset = "llama2-7b";
  bool quick = false;  ///< fewer repeats
};

/// One backend with kv_cache_dtype auto, then one with fp8 (random weights, seed 1, the same
/// points): kv_step_ms per point and format (decode at batch 1 / 32 / 128 and contexts 1k / 4k
/// where they fit, a 2,048-token prefill), kv_step_vs_bf16 (the fp8 step over the bf16 one) and
/// kv_bytes_per_slot.
std::vector<BenchFigure> run_fp8kv_bench(const Fp8KvBenchOptions& options);

}  // namespace servelab::bench
