// engine_bench --kv-cache-dtype: bf16 KV against an FP8 KV cache (kernels/kv_fp8.h) on the cuda
// backend, the same points one backend after the other in this process (bench/engine_bench_fp8kv.h).
#include "bench/engine_bench_fp8kv.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/profiler.h"
#include "engine/model/config.h"

namespace servelab::bench {

std::vector<BenchFigure> run_fp8kv_bench(const Fp8KvBenchOptions& o) {
  ModelConfig model = preset(o.preset);
  model.dtype = DType::bf16;
  std::printf("engine_bench --kv-cache-dtype auto,fp8: %s on %s\n", model.name.c_str(), cuda_device_description(0).c_str());
  struct Point {
    std::string name;
    ProfilePoint p;
  };
  std::vector<Point> points;
  for (const auto& [b, c] : std::vector<std::pair<int, int>>{{1, 1024}, {1, 4096}, {32, 1024}, {32, 4096}, {128, 1024}}) {
    const int ctx = std::min(c, model.max_position);
    points.push_back({"decode b" + std::to_string(b) + " ctx" + std::to_string(ctx),
                      ProfilePoint{ProfilePhase::decode, std::vector<ProfilePoint::Seq>(b, {ctx - 1, 1})}});
  }
  const int prefill = std::min(2048, model.max_position);
  points.push_back({"prefill " + std::to_string(prefill) + " tokens", ProfilePoint{ProfilePhase::prefill, {{0, prefill}}}});
  const int warmup = 3, repeats = o.quick ? 7 : 15;
  std::vector<BenchFigure> out;
  auto add = [&](BenchFigure f) {
    std::printf("  %-22s %-40s %10.4f %s%s\n", f.name.c_str(), f.shape.c_str(), f.value, f.unit.c_str(),
                f.ratio ? (" (" + std::to_string(*f.ratio) + " of " + f.peer + ")").c_str() : "");
    out.push_back(std::move(f));
  };
  // bf16 KV, then fp8 KV with decode_attention_fp8's default (by shape, or the caller's
  // SERVELAB_FP8KV_DECODE) and its CUDA-core kernel (kernels/kv_fp8.h: SERVELAB_FP8KV_DECODE, read
  // at every launch, so each backend's graphs capture their own). Until 2026-12-03 the "fp8 KV"
  // column pinned mma2 here, whatever the default was.
  const char* labels[] = {"bf16 KV", "fp8 KV", "fp8 KV cudacore"};
  const char* user_env = std::getenv("SERVELAB_FP8KV_DECODE");
  const std::string user = user_env ? user_env : "";
  std::vector<std::vector<double>> ms(3);
  for (int f = 0; f < 3; ++f) {
    CudaBackendOptions opts;
    opts.kv_cache_dtype = f == 0 ? KvCacheDType::auto_dtype : KvCacheDType::fp8;
    if (f == 2) setenv("SERVELAB_FP8KV_DECODE", "shift_mask", 1);
    else if (!user.empty()) setenv("SERVELAB_FP8KV_DECODE", user.c_str(), 1);
    else unsetenv("SERVELAB_FP8KV_DECODE");
    std::unique_ptr<CudaBackend> backend = CudaBackend::random(model, 1, opts);
    const std::string label = labels[f];
    add({"kv_bytes_per_slot", label, "bytes", "", double(backend->kv_bytes_per_slot()), std::nullopt});
    int64_t n_slots = 0;
    for (const Point& p : points) n_slots = std::max(n_slots, p.p.n_slots());
    ProfileRunner runner(*backend, n_slots, model.max_position, 7, true);
    for (const Point& p : points) {
      ms[f].push_back(runner.run(p.p, warmup, repeats, 1e9).step_s * 1e3);
      add({"kv_step_ms", p.name + " [" + label + "]", "ms", "", ms[f].back(), std::nullopt});
    }
  }
  if (!user.empty()) setenv("SERVELAB_FP8KV_DECODE", user.c_str(), 1);
  else unsetenv("SERVELAB_FP8KV_DECODE");
  for (int f = 1; f < 3; ++f)
    for (size_t i = 0; i < points.size(); ++i)
      add({"kv_step_vs_bf16", points[i].name + " [" + labels[f] + "]", "x", "bf16 KV step", ms[f][i] / ms[0][i],
           ms[f][i] / ms[0][i]});
  return out;
}

}  // namespace servelab::bench
