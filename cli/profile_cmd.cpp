// servelab profile: times prefill and decode steps of a backend on random (or loaded) weights,
// prints tokens/s per batch size, and writes the step samples the sim backend calibrates from.
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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
  std::vector<int> batch_sizes = {1, 32};
  int prompt_len = 128;
  int decode_steps = 32;
  int threads = 0;
  uint64_t seed = 0;
  std::string json_path;
  std::string sim_device = "h100";
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
  spec.seed = a.seed;
  spec.threads = a.threads;
  if (spec.kind == BackendKind::sim) spec.sim_device = SimDevice::preset(a.sim_device);

  ProfileOptions options;
  options.batch_sizes = a.batch_sizes;
  options.prompt_len = a.prompt_len;
  options.decode_steps = a.decode_steps;
  options.seed = a.seed;
  options.validate();
  options.check_fits(resolve_model_config(spec.model));  // before drawing or loading weights

  std::cerr << "building the " << a.backend << " backend for " << spec.model << "...\n";
  std::unique_ptr<Backend> backend = make_backend(spec);
  std::string device;
  if (const auto* cpu = dynamic_cast<const CpuBackend*>(backend.get()))
    device = cpu_description(cpu->n_threads()) + ", OpenBLAS " + blas_core();
  else
    device = "simulated " + a.sim_device + " (predicted step times)";

  ProfileReport report = profile_backend(*backend, options);
  report.device = device;
  std::cout << profile_table(report);
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    if (!out) throw std::runtime_error(a.json_path + ": cannot open for writing");
    out << profile_json(report);
    if (!out) throw std::runtime_error(a.json_path + ": write failed");
    std::cout << "wrote " << a.json_path << " (" << report.samples.size() << " step samples)\n";
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
      sub.add_option("--batch", a->batch_sizes, "batch sizes, comma separated")->delimiter(',')->capture_default_str();
      sub.add_option("--prompt-len", a->prompt_len, "prompt length; decode starts at this context")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub.add_option("--decode-steps", a->decode_steps, "timed decode steps per batch size")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub.add_option("--threads", a->threads, "attention and BLAS threads (0 = all cores)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber);
      sub.add_option("--seed", a->seed, "seed of the random weights and prompts")->capture_default_str();
      sub.add_option("--sim-device", a->sim_device, "sim backend: roofline device")->capture_default_str();
      sub.add_option("--json", a->json_path, "write figures and per-step samples to this JSON file");
      sub.footer(
          "Prefill is timed for one sequence of --prompt-len tokens and for batch x prompt-len\n"
          "tokens in one step; decode for each batch size at context prompt-len over\n"
          "--decode-steps steps (median step time). --json writes every timed step as\n"
          "{phase, batch_size, n_tokens, sum_context, n_sampled, step_s}: the input of the sim\n"
          "backend's calibrated cost model (backend.sim_profile in a scenario).\n\n"
          "Examples:\n"
          "  servelab profile --preset tiny\n"
          "  servelab profile --preset qwen2.5-0.5b --batch 1,32 --decode-steps 8 --json prof.json\n"
          "  servelab profile --model ./my-llama --threads 2 --prompt-len 256");
      return [a] { return profile_main(*a); };
    });

}  // namespace
}  // namespace servelab::cli
