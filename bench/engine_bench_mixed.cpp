// engine_bench --mixed-contexts: graphed decode steps of mixed context lengths against the same
// batch at its mean context, decode attention cut for the mean (balanced_split) and for the
// longest (bench/engine_bench_mixed.h).
#include "bench/engine_bench_mixed.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/profiler.h"
#include "engine/model/config.h"

namespace servelab::bench {

std::vector<Fp8KvFigure> run_mixed_context_bench(const MixedContextBenchOptions& o) {
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
  std::vector<Fp8KvFigure> out;
  auto add = [&](Fp8KvFigure f) {
    std::printf("  %-18s %-58s %10.4f %s\n", f.name.c_str(), f.shape.c_str(), f.value, f.unit.c_str());
    out.push_back(std::move(f));
  };
  using Plan = DecodePathOptions::SplitPlan;
  const Plan plans[] = {Plan::longest, Plan::mean_up, Plan::mean_down};
  const char* labels[] = {"cut for the longest", "mean rounded up", "mean rounded down"};
  constexpr int kPlans = 3;
  std::vector<std::vector<double>> mixed(kPlans), uniform(kPlans);
  for (int v = 0; v < kPlans; ++v) {
    CudaBackendOptions opts;
    opts.decode.split_plan = plans[v];
    std::unique_ptr<CudaBackend> backend = CudaBackend::random(model, 1, opts);
    int64_t n_slots = 0;
    for (const Point& p : points) n_slots = std::max({n_slots, p.mixed.n_slots(), p.uniform.n_slots()});
    ProfileRunner runner(*backend, n_slots, model.max_position, 7, true);
    for (const Point& p : points) {  // interleaved: each mixed point beside its uniform twin
      mixed[v].push_back(runner.run(p.mixed, warmup, repeats, 1e9).step_s * 1e3);
      uniform[v].push_back(runner.run(p.uniform, warmup, repeats, 1e9).step_s * 1e3);
      add({"mixed_step_ms", p.name + " [" + labels[v] + "]", "ms", "", mixed[v].back(), std::nullopt});
      add({"uniform_step_ms", p.name + " [" + labels[v] + "]", "ms", "", uniform[v].back(), std::nullopt});
    }
  }
  for (int v = 0; v < kPlans; ++v)
    for (size_t i = 0; i < points.size(); ++i)
      add({"mixed_vs_uniform", points[i].name + " [" + labels[v] + "]", "x", "uniform step",
           mixed[v][i] / uniform[v][i], mixed[v][i] / uniform[v][i]});
  for (int v = 1; v < kPlans; ++v)
    for (size_t i = 0; i < points.size(); ++i)
      for (const auto& [kind, ms] : {std::pair{"mixed", &mixed}, std::pair{"uniform", &uniform}})
        add({"vs_longest", points[i].name + " " + kind + " [" + labels[v] + "]", "x", "cut for the longest",
             (*ms)[v][i] / (*ms)[0][i], (*ms)[v][i] / (*ms)[0][i]});
  return out;
}

}  // namespace servelab::bench
