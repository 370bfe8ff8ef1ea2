#pragma once
// One figure an engine_bench mode reports (bench/engine_bench_*.h): what was measured, on which
// shape, its value and unit, and where it is a ratio, against which peer. engine_bench writes them
// to its JSON (keep_figures).
#include <optional>
#include <string>

namespace servelab::bench {

struct BenchFigure {
  std::string name, shape, unit, peer;
  double value = 0;
  std::optional<double> ratio;
};

}  // namespace servelab::bench
