// sim_bench: how fast the simulator runs a point — requests and engine steps per second of wall
// time on one core, the figure a capacity search multiplies by its probes (issue 28, item 5).
// One point of a scenario (the built-in one by default: llama2-7b on a simulated H100, continuous
// batching, paged KV, ShareGPT-like lengths) through PointRunner as `servelab capacity` runs its
// probes: records kept without token times, steps counted but not kept, no files written.
// --keep-steps also builds and keeps every step's StepRecord (what a run's steps.jsonl gets).
//   sim_bench [--scenario FILE] [--strategy I] [--rate R] [--requests N,N,...] [--keep-steps] [--json FILE]
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/capacity_probe.h"
#include "loadgen/scenario.h"

namespace {

using namespace servelab;

constexpr const char* kBuiltIn =
    "name: sim-bench\n"
    "seed: 1\n"
    "model: {preset: llama2-7b}\n"
    "backend: {kind: sim, sim_device: h100}\n"
    "engine: {kv_cache_mb: 40960, max_model_len: 4096}\n"
    "strategies: [{label: continuous-paged, batching: continuous, max_num_seqs: 256,\n"
    "              max_num_batched_tokens: 8192, kv: {kind: paged, block_size: 16}}]\n"
    "workload:\n"
    "  rates: [30]\n"
    "  n_requests: 1000\n"
    "  prompt_tokens: {dist: lognormal, mean: 600, sigma: 1.0, min: 4, max: 3072}\n"
    "  output_tokens: {dist: lognormal, mean: 200, sigma: 0.8, min: 1, max: 1024}\n";

struct Args {
  std::string scenario;  // empty = the built-in one
  size_t strategy = 0;
  double rate = 0.0;     // 0 = the scenario's first
  std::vector<int> requests = {10000, 100000};
  bool keep_steps = false;  // capacity probes do not keep them
  std::string json;
};

std::vector<int> parse_counts(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

int run(const Args& a) {
  const Scenario sc = a.scenario.empty() ? load_scenario_text(kBuiltIn, "sim_bench (built in)") : load_scenario(a.scenario);
  if (sc.backend.kind != BackendKind::sim) throw std::invalid_argument("sim_bench runs sim scenarios (backend.kind: sim)");
  const double rate = a.rate > 0 ? a.rate : sc.workload.rates.at(0);
  const PointRunner runner(sc);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::printf("sim_bench: %s, strategy %zu, %.3g req/s, one thread\n", sc.name.c_str(), a.strategy, rate);
  // Wall time and this process's CPU time: on a shared, loaded machine the wall clock also counts
  // the time other processes held the core, the CPU time only this run's work.
  std::printf("%10s %10s %10s %10s %12s %12s %12s %12s\n", "requests", "steps", "wall s", "cpu s", "requests/s",
              "steps/s", "req/cpu-s", "1M req cpu-s");
  for (int n : a.requests) {
    PointRunOptions o;
    o.n_requests = n;
    o.keep_steps = a.keep_steps;
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    const PointRun r = runner.run(a.strategy, rate, o);
    const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double steps = double(r.stats.n_steps);
    std::printf("%10d %10.0f %10.3f %10.3f %12.0f %12.0f %12.0f %12.1f\n", n, steps, wall, cpu, n / wall, steps / wall,
                n / cpu, 1e6 / (n / cpu));
    rows.push_back({{"requests", n}, {"finished", r.stats.n_finished}, {"steps", steps}, {"wall_s", wall},
                    {"cpu_s", cpu}, {"requests_per_s", n / wall}, {"steps_per_s", steps / wall},
                    {"requests_per_cpu_s", n / cpu}});
  }
  if (!a.json.empty()) {
    nlohmann::ordered_json j{{"scenario", sc.name}, {"strategy", a.strategy}, {"rate", rate}, {"runs", rows}};
    std::ofstream(a.json) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
        return argv[++i];
      };
      if (k == "--scenario") a.scenario = value();
      else if (k == "--strategy") a.strategy = std::stoul(value());
      else if (k == "--rate") a.rate = std::stod(value());
      else if (k == "--requests") a.requests = parse_counts(value());
      else if (k == "--json") a.json = value();
      else if (k == "--keep-steps") a.keep_steps = true;
      else throw std::invalid_argument("unknown argument " + k +
                                       " (usage: sim_bench [--scenario FILE] [--strategy I] [--rate R] "
                                       "[--requests N,N,...] [--keep-steps] [--json FILE])");
    }
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sim_bench: %s\n", e.what());
    return 2;
  }
}
