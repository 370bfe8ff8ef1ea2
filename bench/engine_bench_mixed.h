#pragma once
// engine_bench --mixed-contexts (bench/engine_bench_mixed.cpp): decode steps whose sequences hold
// contexts of mixed lengths, as serving makes them, against the same batch with every sequence at
// the mean context (what a profile's decode points time): the price a sim fitted on uniform
// points leaves out.
#include <string>
#include <vector>

#include "bench/bench_figure.h"

namespace servelab::bench {

struct MixedContextBenchOptions {
  std::string preset = "llama3-8b";
  bool quick = false;  ///< fewer repeats
};

/// Per batch (16, 32, 64) and context spread (uniform 1,024-3,840 like long prompts; 32-2,048
/// like chat), seeded draws: mixed_step_ms (the drawn contexts), uniform_step_ms (every sequence
/// at their mean) and mixed_vs_uniform, graphed decode steps on one backend.
std::vector<BenchFigure> run_mixed_context_bench(const MixedContextBenchOptions& options);

}  // namespace servelab::bench
