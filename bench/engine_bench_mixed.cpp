// engine_bench --mixed-contexts: graphed decode steps of mixed context lengths against the same
// batch at its mean context (bench/engine_bench_mixed.h).
#include "bench/engine_bench_mixed.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/profiler.h"
#include "engine/model/config.h"

namespace servelab::bench {

std::vector<BenchFigure> run_mixed_context_bench(const MixedContextBenchOptions& o) {
  ModelConfig model = preset(o.preset);
  model.dtype = DType::bf16;
  std::printf("engine_bench --mixed-contexts: %s on %s\n", model.name.c_str(), cuda_device_description(0).c_str());
  struct Spread {
    const char* name;
    int lo, hi;
  };
  const Spread spreads[] = {{"long 1024-3840", 1024, 3840}, {"chat 32-2048", 32, 2048}};
  struct Point {
    std::string name;
    ProfilePoint mixed, uniform;
  };
  std::vector<Point> points;
  std::mt19937_64 rng(25);
  for (const Spread& sp : spreads)
    for (int b : {16, 32, 64}) {
      std::uniform_int_distribution<int> len(sp.lo, std::min(sp.hi, model.max_position - 1));
      Point p;
      p.mixed.phase = p.uniform.phase = ProfilePhase::decode;
      int64_t total = 0;
      for (int i = 0; i < b; ++i) {
        const int c = len(rng);
        p.mixed.seqs.push_back({c - 1, 1});
        total += c;
      }
      const int mean = int((total + b - 1) / b);
      p.uniform.seqs.assign(size_t(b), ProfilePoint::Seq{mean - 1, 1});
      p.name = "decode b" + std::to_string(b) + " " + sp.name + " (mean " + std::to_string(mean) + ")";
      points.push_back(std::move(p));
    }
  const int warmup = 3, repeats = o.quick ? 9 : 21;
  std::vector<BenchFigure> out;
  auto add = [&](BenchFigure f) {
    std::printf("  %-18s %-40s %10.4f %s\n", f.name.c_str(), f.shape.c_str(), f.value, f.unit.c_str());
    out.push_back(std::move(f));
  };
  std::vector<double> mixed, uniform;
  {
    std::unique_ptr<CudaBackend> backend = CudaBackend::random(model, 1, CudaBackendOptions{});
    int64_t n_slots = 0;
    for (const Point& p : points) n_slots = std::max({n_slots, p.mixed.n_slots(), p.uniform.n_slots()});
    ProfileRunner runner(*backend, n_slots, model.max_position, 7, true);
    for (const Point& p : points) {  // interleaved: each mixed point beside its uniform twin
      mixed.push_back(runner.run(p.mixed, warmup, repeats, 1e9).step_s * 1e3);
      uniform.push_back(runner.run(p.uniform, warmup, repeats, 1e9).step_s * 1e3);
      add({"mixed_step_ms", p.name, "ms", "", mixed.back(), std::nullopt});
      add({"uniform_step_ms", p.name, "ms", "", uniform.back(), std::nullopt});
    }
  }
  for (size_t i = 0; i < points.size(); ++i)
    add({"mixed_vs_uniform", points[i].name, "x", "uniform step", mixed[i] / uniform[i], mixed[i] / uniform[i]});
  return out;
}

}  // namespace servelab::bench
