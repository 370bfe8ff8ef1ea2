// servelab profile: times prefill and decode steps of a backend on random (or loaded) weights,
// prints tokens/s per batch size, and writes the step samples the sim backend calibrates from.
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "analysis/environment.h"
#include "cli/command.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/cpu_gemm.h"
#include "engine/backend/make_backend.h"
#include "engine/backend/profiler.h"

namespace servelab::cli {
namespace {

struct ProfileArgs {
  std::string backend = "cpu";
  std::string preset = "tiny";
  std::string model_dir;
  ProfileOptions grid;
  int threads = 0;
  std::string json_path;
  std::string sim_device = "h100";
  std::string hardware;  // "" = cpu-2core for cpu, the sim device for sim
};

/// "Intel(R) Xeon(R) ... , 2 threads" from /proc/cpuinfo where it exists.
std::string cpu_description(int n_threads) {
  std::string name = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) name = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  return name + ", " + std::to_string(n_threads) + " threads of " +
         std::to_string(std::thread::hardware_concurrency());
}

int profile_main(const ProfileArgs& a) {
  BackendSpec spec;
  spec.kind = parse_backend_kind(a.backend);
  spec.model = a.model_dir.empty() ? a.preset : a.model_dir;
  spec.seed = a.grid.seed;
  spec.threads = a.threads;
  if (spec.kind == BackendKind::sim) spec.sim_device = SimDevice::preset(a.sim_device);
  const std::string hardware = !a.hardware.empty() ? a.hardware : spec.kind == BackendKind::sim ? a.sim_device : "cpu-2core";
  SimDevice::preset(hardware);  // a known preset: the roofline beyond the grid is priced on it

  const ProfileOptions& options = a.grid;
  options.validate();
  options.check_fits(resolve_model_config(spec.model));  // before drawing or loading weights

  std::cerr << "building the " << a.backend << " backend for " << spec.model << "...\n";
  std::unique_ptr<Backend> backend = make_backend(spec);
  std::string device;
  if (const auto* cpu = dynamic_cast<const CpuBackend*>(backend.get()))
    device = cpu_description(cpu->n_threads()) + ", OpenBLAS " + blas_core();
  else
    device = "simulated " + a.sim_device + " (predicted step times)";

  ProfileReport report = profile_backend(*backend, options, [](const std::string& line) { std::cerr << line << "\n"; });
  report.device = device;
  report.hardware = hardware;
  report.commit = analysis::git_commit(".");
  report.date = analysis::utc_now_iso8601();
  std::cout << profile_table(report);
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    if (!out) throw std::runtime_error(a.json_path + ": cannot open for writing");
    out << profile_json(report);
    if (!out) throw std::runtime_error(a.json_path + ": write failed");
    std::cout << "wrote " << a.json_path << " (" << report.samples.size() << " grid points, " << report.wall_s
              << " s)\n";
  }
  return 0;
}

const Registrar reg(
    "profile", "Measure a backend's prefill and decode throughput (calibrates the sim backend)",
    [](CLI::App& sub) -> CommandMain {
      auto a = std::make_shared<ProfileArgs>();
      sub.add_option("--backend", a->backend, "backend to time: cpu (or sim, which reports its predictions)")
          ->capture_default_str()
          ->check(CLI::IsMember({"cpu", "sim"}));
      auto* preset = sub.add_option("--preset", a->preset, "model preset with random weights")->capture_default_str();
      auto* model = sub.add_option("--model", a->model_dir, "Hugging Face folder (config.json + *.safetensors)")
                        ->check(CLI::ExistingDirectory);
      preset->excludes(model);
      ProfileOptions& g = a->grid;
      sub.add_option("--prefill-lens", g.prefill_lens, "one-sequence prefill lengths")->delimiter(',')->capture_default_str();
      sub.add_option("--batch", g.batch_sizes, "decode batch sizes (and batched prefills)")->delimiter(',')->capture_default_str();
      sub.add_option("--contexts", g.contexts, "decode contexts; chunked prefills start at them")->delimiter(',')->capture_default_str();
      sub.add_option("--chunk-lens", g.chunk_lens, "chunked-prefill and mixed-step chunk lengths")->delimiter(',')->capture_default_str();
      sub.add_option("--prompt-len", g.prompt_len, "tokens per sequence in batched prefills")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub.add_option("--max-rows", g.max_rows, "skip batched prefills of more rows")->capture_default_str()->check(CLI::PositiveNumber);
      sub.add_option("--repeats", g.repeats, "timed repeats per point (median kept)")->capture_default_str()->check(CLI::PositiveNumber);
      sub.add_option("--min-point-s", g.min_point_s, "stop repeating a point once its repeats took this long")->capture_default_str();
      sub.add_option("--threads", a->threads, "attention and BLAS threads (0 = all cores)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber);
      sub.add_option("--seed", a->grid.seed, "seed of the random weights and prompts")->capture_default_str();
      sub.add_option("--sim-device", a->sim_device, "sim backend: roofline device")->capture_default_str();
      sub.add_option("--hardware", a->hardware,
                     "device preset the profile is for (prices steps beyond the grid; default cpu-2core on cpu)");
      sub.add_option("--json", a->json_path, "write figures and per-step samples to this JSON file");
      sub.footer(
          "Times real steps over a grid: one-sequence prefills (--prefill-lens), batched prefills\n"
          "(batch x --prompt-len rows, up to --max-rows), decodes (--batch x --contexts), chunked\n"
          "prefills at a context (--chunk-lens x --contexts) and mixed steps (decodes plus a chunk).\n"
          "Each point keeps the median of --repeats runs. --json writes the profile (device, model\n"
          "shape hash, backend, commit, every point's shape and times): backend.sim_profile in a\n"
          "scenario calibrates the sim backend from it, and a profile of another model shape or\n"
          "device is refused there.\n\n"
          "Examples:\n"
          "  servelab profile --preset tiny\n"
          "  servelab profile --preset qwen2.5-0.5b --json results/profiles/qwen2.5-0.5b-cpu.json\n"
          "  servelab profile --model ./my-llama --threads 2 --batch 1,4,16 --contexts 64,512");
      return [a] { return profile_main(*a); };
    });

}  // namespace
}  // namespace servelab::cli
