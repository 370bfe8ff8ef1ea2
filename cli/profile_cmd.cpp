// servelab profile: times prefill and decode steps of a backend on random (or loaded) weights,
// prints tokens/s per batch size, and writes the step samples the sim backend calibrates from.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "analysis/environment.h"
#include "cli/command.h"
#include "cli/report_input.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/cpu_gemm.h"
#include "engine/backend/make_backend.h"
#include "engine/backend/profiler.h"
#include "engine/spec/draft_rounds.h"
#include "engine/spec/spec_config.h"
#include "loadgen/host_overhead_probe.h"
#include "loadgen/profile_grid_for.h"
#include "loadgen/scenario.h"

namespace servelab::cli {
namespace {

struct ProfileArgs {
  std::string backend = "cpu";
  std::string preset = "tiny";
  std::string model_dir;
  ProfileOptions grid;
  int threads = 0;
  std::string cpu_gemm = "tuned";
  std::string json_path;
  std::string sim_device = "h100";
  std::string hardware;  // "" = cpu-2core for cpu, the sim device for sim, from the GPU's name for cuda
  int device = 0;        // cuda: device ordinal
  std::string dtype = "bf16";  // cuda: weights, activations and KV
  std::string quantization;    // cpu, sim: none | fp8 | int4_awq | int4_gptq ("" = none)
  std::string kv_cache_dtype;  // auto | fp8 ("" = auto)
  int tensor_parallel = 1;  // cuda: ranks on devices 0..N-1 over NCCL; sim: the roofline's TP
  double kv_gb = 0.0;    // KV arena cap in GB; 0 = the grid's largest point (cuda: capped by free memory)
  int warmup = -1;       // untimed runs per point; -1 = 2 on cuda (GEMM choice, graph capture), else 0
  double warmup_s = -1;  // untimed steps before the grid, seconds; -1 = 1 on cpu and cuda, 0 on sim
  double sustained_s = 0;  // the sustained-load probe, seconds (0: none)
  std::string kv = "paged";    // the timed sequences' KV layout
  bool kv_spread = false;      // spread them over the --kv-gb arena
  std::string spread_shape;    // --spread-shape even | exponential ("" = even)
  bool host_overhead = true;  // also measure the engine's per-step host work (loadgen/host_overhead_probe.h)
  std::string for_scenario;   // the grid from this scenario's lengths and batches (loadgen/profile_grid_for.h)
  int draft_layers = 0;       // also profile the preset's first N layers (a `self` draft), as "draft" in the JSON
  std::string draft_preset;   // also profile this preset (a `draft_model` draft), as "draft" in the JSON
  bool draft_rounds = true;   // with a draft: also time whole proposer rounds (the JSON's "draft"."rounds")
  std::vector<const CLI::Option*> grid_flags;  // the grid's own flags: given ones win over --for-scenario
  const CLI::Option* preset_flag = nullptr;    // neither given with --for-scenario: the scenario's model
  const CLI::Option* model_flag = nullptr;
};

/// KV budget of a cuda profile when --kv-gb is not given: what 90% of the GPU leaves after the
/// weights, this process's buffers and the activations of the grid's largest step.
int64_t default_cuda_kv_bytes(const Backend& backend, const ProfileOptions& options) {
  int max_rows = 1, max_seqs = 1;
  for (const ProfilePoint& p : profile_grid(options)) {
    int rows = 0;
    for (const ProfilePoint::Seq& s : p.seqs) rows += s.n_new;
    max_rows = std::max(max_rows, rows);
    max_seqs = std::max(max_seqs, static_cast<int>(p.seqs.size()));
  }
  LoraConfig lora;  // --lora-rank: the adapters' pool comes out of the same 90%
  if (options.lora_rank > 0)
    lora = {.enabled = true,
            .max_loras = *std::max_element(options.lora_adapters.begin(), options.lora_adapters.end()),
            .max_lora_rank = options.lora_rank};
  return kv_bytes_for_gpu_utilization(backend, 0.9, max_rows, max_seqs, lora);
}

/// Whole proposer rounds of the draft `dspec` describes (engine/spec/draft_rounds.h), on a backend
/// of its own with the proposer the engine would build: the draft's batch sizes, the target's
/// verification k (3 without any), the middle decode context, the batched prefills' prompt lengths.
std::vector<DraftRound> time_draft_rounds(const BackendSpec& dspec, const ProfileOptions& grid, const std::string& method) {
  DraftRoundOptions r;
  r.batch_sizes = grid.batch_sizes;
  r.ks = grid.verify_ks.empty() ? std::vector<int>{3} : grid.verify_ks;
  std::vector<int> contexts = grid.contexts;
  std::sort(contexts.begin(), contexts.end());
  r.context = std::max(2, contexts.empty() ? 128 : contexts[contexts.size() / 2]);
  r.prompt_lens = grid.prompt_lens;
  r.max_prompt_rows = 16384;
  r.warmup = std::max(2, grid.warmup);
  r.repeats = std::max(5, grid.repeats);
  r.seed = grid.seed;
  const int most_seqs = *std::max_element(r.batch_sizes.begin(), r.batch_sizes.end());
  const int longest_prompt = r.prompt_lens.empty() ? 0 : *std::max_element(r.prompt_lens.begin(), r.prompt_lens.end());
  const int k_max = *std::max_element(r.ks.begin(), r.ks.end());
  ModelProposerOptions o;
  o.max_num_seqs = std::max(256, most_seqs);
  o.max_num_batched_tokens = std::max(2048, grid.max_rows);
  o.max_model_len = std::max(r.context + (r.warmup + r.repeats + 1) * (k_max + 1), longest_prompt + 1) + k_max + 16;
  // n_threads: ModelProposerOptions' default, as make_proposer's cpu draft runs
  const BackendFactory factory(dspec);
  std::unique_ptr<ModelProposer> proposer;
  if (factory.weights()) {  // cpu: the draft shares its weights, as make_proposer's cpu draft does
    o.kv_cache_bytes = int64_t(256) << 20;
    proposer = std::make_unique<ModelProposer>(method, factory.weights(), factory.weights()->config.vocab_size, o);
  } else {  // a device draft: its arena as make_proposer gives it beside a cuda target
    o.kv_cache_bytes = ProposerTarget{}.device_draft_kv_bytes;
    std::unique_ptr<Backend> b = factory.make();
    const int vocab = b->config().vocab_size;
    proposer = std::make_unique<ModelProposer>(method, std::move(b), vocab, o);
  }
  std::cerr << "timing the draft's proposer rounds...\n";
  return profile_draft_rounds(*proposer, proposer->draft_config().vocab_size, r,
                              [](const std::string& line) { std::cerr << line << "\n"; });
}

int profile_main(const ProfileArgs& a) {
  BackendSpec spec;
  spec.kind = parse_backend_kind(a.backend);
  spec.model = a.model_dir.empty() ? a.preset : a.model_dir;
  const bool model_given = (a.preset_flag && a.preset_flag->count() > 0) || (a.model_flag && a.model_flag->count() > 0);
  std::optional<Scenario> scenario;  // --for-scenario: read once, for the model and the grid
  if (!a.for_scenario.empty()) scenario = load_scenario(a.for_scenario);
  if (scenario && !model_given)  // profile the model the scenario runs
    spec.model = scenario->model.path.empty() ? scenario->model.preset : scenario->model.path;
  spec.seed = a.grid.seed;
  spec.threads = a.threads;
  spec.cpu_gemm = a.cpu_gemm == "openblas" ? CpuGemmPath::openblas : CpuGemmPath::tuned;
  spec.device = a.device;
  spec.tensor_parallel = a.tensor_parallel;
  spec.storage_dtype = parse_dtype(a.dtype);  // BackendSpec::validate refuses f16 on cpu
  if (!a.quantization.empty()) spec.quantization = parse_quantization(a.quantization);
  if (!a.kv_cache_dtype.empty()) spec.kv_cache_dtype = parse_kv_cache_dtype(a.kv_cache_dtype);
  if (a.tensor_parallel != 1 && spec.kind == BackendKind::cpu)
    throw std::invalid_argument("--tensor-parallel applies to --backend cuda or sim (got --backend cpu)");
  const bool cuda = spec.kind == BackendKind::cuda;
  if (a.device != 0 && !cuda)
    throw std::invalid_argument("--device applies to --backend cuda (got --backend " + a.backend + ")");
  if (!(a.kv_gb >= 0.0)) throw std::invalid_argument("--kv-gb must be >= 0 (got " + std::to_string(a.kv_gb) + ")");
  if (spec.kind == BackendKind::sim) spec.sim_device = SimDevice::preset(a.sim_device);
  std::string hardware = !a.hardware.empty() ? a.hardware : spec.kind == BackendKind::sim ? a.sim_device : cuda ? "" : "cpu-2core";
  if (!hardware.empty()) SimDevice::preset(hardware);  // a known preset: the roofline beyond the grid is priced on it

  ProfileOptions options = a.grid;
  int draft_layers = a.draft_layers;
  std::string draft_preset = a.draft_preset;
  if (draft_layers > 0 && !draft_preset.empty()) throw std::invalid_argument("give --draft-layers or --draft-preset, not both");
  if (!a.for_scenario.empty()) {
    const ScenarioGrid derived = profile_grid_for(*scenario, a.grid);
    const ProfileOptions& d = derived.grid;
    auto given = [&](const char* flag) {
      return std::any_of(a.grid_flags.begin(), a.grid_flags.end(),
                         [&](const CLI::Option* o) { return o->get_name() == flag && o->count() > 0; });
    };
    if (!given("--prefill-lens")) options.prefill_lens = d.prefill_lens;
    if (!given("--batch")) options.batch_sizes = d.batch_sizes;
    if (!given("--contexts")) options.contexts = d.contexts;
    if (!given("--chunk-lens")) options.chunk_lens = d.chunk_lens;
    if (!given("--prompt-len")) options.prompt_lens = d.prompt_lens;
    if (!given("--max-rows")) options.max_rows = d.max_rows;
    if (!given("--verify-k")) options.verify_ks = d.verify_ks;
    if (!given("--lora-rank")) options.lora_rank = d.lora_rank;
    if (!given("--lora-adapters")) options.lora_adapters = d.lora_adapters;
    if (a.draft_layers == 0 && a.draft_preset.empty()) {  // the scenario's draft, profiled beside the target
      draft_layers = derived.draft_layers;
      draft_preset = derived.draft_preset;
    }
    std::cerr << "grid from " << a.for_scenario << " (flags given on the command line win):\n";
    for (const std::string& line : derived.notes) std::cerr << "  " << line << "\n";
  }
  options.warmup = a.warmup >= 0 ? a.warmup : cuda ? 2 : 0;
  options.warmup_s = a.warmup_s >= 0 ? a.warmup_s : spec.kind == BackendKind::sim ? 0.0 : 1.0;
  options.sustained_s = a.sustained_s;
  options.max_kv_bytes = static_cast<int64_t>(a.kv_gb * 1e9);
  options.fill_kv = spec.kind != BackendKind::sim;  // the sim would charge the fill as swap traffic
  options.kv_kind = a.kv == "naive" ? KvKind::naive : KvKind::paged;
  options.kv_spread = a.kv_spread;
  if (!a.spread_shape.empty()) {
    if (!options.spread_decodes) throw std::invalid_argument("--spread-shape needs --spread-decodes (the points it shapes)");
    options.spread_shape = parse_spread_shape(a.spread_shape);
  }
  if (a.kv_spread && a.kv_gb <= 0.0)
    throw std::invalid_argument("--kv-spread needs --kv-gb: the arena the sequences spread over (the runs' KV size)");
  options.validate();
  const ModelConfig profiled_model = resolve_model_config(spec.model);
  if (options.max_len == 0) options.max_len = profiled_model.max_position;  // chunks near it start earlier
  options.check_fits(profiled_model);  // before drawing or loading weights

  std::cerr << "building the " << a.backend << " backend for " << spec.model << "...\n";
  std::unique_ptr<Backend> backend = make_backend(spec);  // without CUDA: the exit-2 message
  std::string device = backend->device_description();
  if (options.lora_rank > 0 && !backend->caps().lora)  // before the grid, not after it
    throw std::invalid_argument("--lora-rank: the " + a.backend + " backend runs no LoRA adapters here" +
                                (a.tensor_parallel > 1 ? " (not under tensor parallelism)" : ""));
  if (cuda) {
    if (hardware.empty()) hardware = sim_hardware_for_device(device);
    if (hardware.empty()) {
      std::string names;
      for (const std::string& n : SimDevice::preset_names()) names += (names.empty() ? "" : ", ") + n;
      throw std::invalid_argument("no sim device preset matches the GPU '" + device + "': pass --hardware (one of " +
                                  names + ")");
    }
    if (options.max_kv_bytes == 0) {
      options.max_kv_bytes = default_cuda_kv_bytes(*backend, options);
      std::cerr << "KV budget " << options.max_kv_bytes / 1e9 << " GB (90% of the GPU after weights and "
                << "activations; --kv-gb sets it)\n";
    }
  }

  ProfileReport report = profile_backend(*backend, options, [](const std::string& line) { std::cerr << line << "\n"; });
  if (cuda) device += ", " + a.dtype;  // what the weights, activations and KV were stored in
  report.device = device;
  report.tensor_parallel = a.tensor_parallel;
  if (cuda && a.tensor_parallel > 1) {  // the sim's TP term: one all-reduce per message size a step sends
    std::vector<int64_t> sizes;
    const int64_t hidden = backend->config().hidden_size;
    for (int64_t rows = 1; rows <= 16384; rows *= 2) sizes.push_back(rows * hidden * 2);
    report.all_reduce_s = backend->time_all_reduce(sizes);
    device += ", tensor_parallel " + std::to_string(a.tensor_parallel);
    report.device = device;
  }
  if (a.host_overhead) {  // the engine's work around forward(), on this machine's CPU
    const HostOverheadProbe probe = measure_host_overhead(backend->config());
    report.host_overhead = probe.fitted;
    for (const HostOverheadPoint& p : probe.points) report.host_points.push_back({p.mean_seqs, p.step_s});
    std::cerr << "engine host overhead per step: " << probe.fitted.per_step_s * 1e6 << " us + "
              << probe.fitted.per_seq_s * 1e6 << " us per sequence\n";
  }
  if (spec.kind == BackendKind::cpu) {  // the ceilings a run's roofline efficiency can be priced at (backend.ceilings)
    CeilingProbeOptions probe;
    probe.threads = a.threads;
    report.ceilings = probe_cpu_ceilings(probe);
    std::cerr << "ceilings: copy " << report.ceilings->copy_bytes_s / 1e9 << " GB/s, GEMM "
              << report.ceilings->gemm_flops / 1e9 << " GFLOP/s (" << report.ceilings->detail << ")\n";
  }
  report.hardware = hardware;
  report.commit = current_commit();  // SERVELAB_COMMIT when set (a copy outside its checkout)
  report.date = analysis::utc_now_iso8601();
  std::cout << profile_table(report);
  // The draft: its own steps (catch-up chunks and one-row decodes) on the same device and grid,
  // timed after the target's, in a backend of its own (the target's is released first).
  std::optional<ProfileReport> draft;
  if (draft_layers > 0 || !draft_preset.empty()) {
    BackendSpec dspec = spec;
    if (draft_layers > 0) dspec.first_layers = draft_layers;
    else dspec.model = draft_preset;
    ProfileOptions dgrid = options;
    dgrid.verify_ks.clear();  // a draft verifies nothing
    backend.reset();
    std::cerr << "profiling the draft (" << (draft_layers > 0 ? spec.model + ", first " + std::to_string(draft_layers) + " layers" : draft_preset)
              << ")...\n";
    std::unique_ptr<Backend> dbackend = make_backend(dspec);
    draft = profile_backend(*dbackend, dgrid, [](const std::string& line) { std::cerr << line << "\n"; });
    dbackend.reset();
    if (a.draft_rounds) draft->rounds = time_draft_rounds(dspec, options, draft_layers > 0 ? "self" : "draft_model");
    draft->device = report.device;
    draft->hardware = hardware;
    draft->commit = report.commit;
    draft->date = report.date;
    std::cout << "draft:\n" << profile_table(*draft);
  }
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    if (!out) throw std::runtime_error(a.json_path + ": cannot open for writing");
    out << profile_json(report, draft ? &*draft : nullptr);
    if (!out) throw std::runtime_error(a.json_path + ": write failed");
    std::cout << "wrote " << a.json_path << " (" << report.samples.size() << " grid points, " << report.wall_s
              << " s)\n";
  }
  if (!report.skipped.empty()) {
    std::cout << report.skipped.size() << " grid point(s) skipped, their KV over the budget of "
              << options.max_kv_bytes / 1e9 << " GB:\n";
    for (const ProfilePoint& p : report.skipped)
      std::cout << "  " << p.describe() << " (needs " << p.n_slots() * report.kv_bytes_per_slot / 1e9 << " GB)\n";
  }
  return 0;
}

const Registrar register_profile(
    "profile", "Measure a backend's prefill and decode throughput (calibrates the sim backend)",
    [](CLI::App& sub) -> CommandMain {
      auto a = std::make_shared<ProfileArgs>();
      sub.add_option("--backend", a->backend,
                     "backend to time: cpu, cuda (servelab built with CUDA), or sim (reports its predictions)")
          ->capture_default_str()
          ->check(CLI::IsMember({"cpu", "cuda", "sim"}));
      sub.add_option("--device", a->device, "cuda: device ordinal")->capture_default_str()->check(CLI::NonNegativeNumber);
      sub.add_option("--dtype", a->dtype, "cuda: weights, activations and KV in bf16 or f16 (sim: accepted, same cost)")
          ->capture_default_str()
          ->check(CLI::IsMember({"bf16", "f16"}));
      sub.add_option("--quantization", a->quantization, "cpu, sim: weight format (quantized on load from bf16)")
          ->check(CLI::IsMember({"none", "fp8", "int4_awq", "int4_gptq"}));
      sub.add_option("--kv-cache-dtype", a->kv_cache_dtype, "KV element type, auto or fp8 (cpu, sim; cuda on one GPU)")
          ->check(CLI::IsMember({"auto", "fp8"}));
      sub.add_option("--tensor-parallel", a->tensor_parallel,
                     "cuda: ranks on devices 0..N-1 over NCCL (the profile records N and the measured all-reduce "
                     "per message size); sim: the roofline's tensor-parallel degree")
          ->capture_default_str()
          ->check(CLI::Range(1, 64));
      sub.add_option("--kv-gb", a->kv_gb,
                     "KV arena cap in GB; points needing more are skipped and listed (default: the grid's largest "
                     "point; on cuda at most what 90% of the GPU leaves)");
      sub.add_option("--kv", a->kv, "how the timed sequences hold K/V: paged (blocks of 16) or naive (one region each); "
                                    "profile the layout of the strategies the sim will price")
          ->capture_default_str()
          ->check(CLI::IsMember({"paged", "naive"}));
      sub.add_flag("--kv-spread", a->kv_spread,
                   "naive KV: spread each point's regions evenly over the --kv-gb arena (as a serving engine's arena "
                   "holds them), instead of packing them at its start");
      sub.add_flag("!--no-host-overhead", a->host_overhead,
                   "skip measuring the engine's host work per step outside forward() (scheduling, KV "
                   "bookkeeping, tokens, records), which the sim adds to every step");
      sub.add_option("--warmup-s", a->warmup_s,
                     "untimed steps for this many seconds before the first timed point (default 1 on cpu and cuda, 0 "
                     "on sim): a process's first steps run slower than its later ones")
          ->check(CLI::Range(0.0, 600.0));
      sub.add_option("--sustained-s", a->sustained_s,
                     "after the grid, the sustained-load probe for this many seconds (e.g. 4 on cuda; default 0, "
                     "none): the grid's heaviest prefill back to back with a decode after every 4, so the sim prices "
                     "how a GPU held at its power cap slows each step by the load before it")
          ->check(CLI::Range(0.0, 600.0));
      sub.add_option("--warmup", a->warmup, "untimed runs per point before the repeats (default 2 on cuda, else 0)")
          ->check(CLI::Range(0, 100));
      auto* preset = sub.add_option("--preset", a->preset, "model preset with random weights (with --for-scenario and no --model: the scenario's model)")->capture_default_str();
      auto* model = sub.add_option("--model", a->model_dir, "Hugging Face folder (config.json + *.safetensors)")
                        ->check(CLI::ExistingDirectory);
      preset->excludes(model);
      a->preset_flag = preset;
      a->model_flag = model;
      ProfileOptions& g = a->grid;
      sub.add_option("--prefill-lens", g.prefill_lens, "one-sequence prefill lengths")->delimiter(',')->capture_default_str();
      sub.add_option("--batch", g.batch_sizes, "decode batch sizes (and batched prefills)")->delimiter(',')->capture_default_str();
      sub.add_option("--contexts", g.contexts, "decode contexts; chunked prefills start at them")->delimiter(',')->capture_default_str();
      sub.add_option("--chunk-lens", g.chunk_lens, "chunked-prefill and mixed-step chunk lengths")->delimiter(',')->capture_default_str();
      sub.add_option("--prompt-len", g.prompt_lens, "tokens per sequence in batched prefills (a list: one family each)")
          ->delimiter(',')
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub.add_option("--max-rows", g.max_rows, "skip batched prefills of more rows")->capture_default_str()->check(CLI::PositiveNumber);
      sub.add_option("--for-scenario", a->for_scenario,
                     "take the grid from this scenario: prompt and context lengths at quantiles of its planned "
                     "requests, batches up to its strategies' largest, its chunk (grid flags given as well win)")
          ->check(CLI::ExistingFile);
      sub.add_option("--verify-k", g.verify_ks,
                     "also time verification steps of speculative decoding: every sequence scores k + 1 rows (its "
                     "last token and k drafts) and draws each, at --batch x --contexts, for each k listed")
          ->delimiter(',')
          ->check(CLI::Range(1, 16));
      sub.add_option("--lora-rank", g.lora_rank,
                     "also time steps whose sequences all run random LoRA adapters of this rank (all seven linears) "
                     "against the same steps without, into the JSON's \"lora\": the sim's LoRA figures for this "
                     "device (0: none)")
          ->capture_default_str()
          ->check(CLI::Range(0, 256));
      sub.add_option("--lora-adapters", g.lora_adapters,
                     "with --lora-rank: distinct adapters among a LoRA point's sequences (1 is always timed)")
          ->delimiter(',')
          ->capture_default_str()
          ->check(CLI::Range(1, 1024));
      sub.add_option("--draft-layers", a->draft_layers,
                     "also profile the preset's first N layers (a `self` draft of N layers) on the same grid, into the "
                     "JSON's \"draft\": the sim prices that draft's steps from it")
          ->check(CLI::Range(1, 1024));
      sub.add_option("--draft-preset", a->draft_preset,
                     "also profile this preset (a `draft_model` draft) on the same grid, into the JSON's \"draft\"");
      sub.add_flag("!--no-draft-rounds", a->draft_rounds,
                   "with a draft: do not time whole proposer rounds (B sequences drafting k, host work included), "
                   "from which the sim prices the proposer's work around the draft's forward steps");
      for (const char* f : {"--prefill-lens", "--batch", "--contexts", "--chunk-lens", "--prompt-len", "--max-rows", "--verify-k",
                            "--lora-rank", "--lora-adapters"})
        a->grid_flags.push_back(sub.get_option(f));
      sub.add_option("--repeats", g.repeats, "timed repeats per point (median kept)")->capture_default_str()->check(CLI::PositiveNumber);
      sub.add_option("--min-point-s", g.min_point_s, "stop repeating a point once its repeats took this long")->capture_default_str();
      sub.add_flag("!--no-bucket-edges", g.bucket_edges,
                   "do not add decodes of each batch bucket the backend pads decode steps to (cuda's CUDA graphs) "
                   "that no --batch size runs as");
      sub.add_flag("!--no-padded-decodes", g.padded_decodes,
                   "do not time decodes with padding rows (static batching's steps once some sequences finished; the "
                   "sim prices those from them)");
      sub.add_flag("--spread-decodes", g.spread_decodes,
                   "also time each decode batch with its contexts spread over [c/2, 3c/2] (mean c): what mixed "
                   "lengths cost over the mean, priced by the sim per bucket (off by default: on the H200 matrix it "
                   "moved the long-prompt cell's TPOT p50 4 points closer and chat cells' further; "
                   "results/sim-validation/README.md)");
      sub.add_option("--spread-shape", a->spread_shape,
                     "with --spread-decodes: even (contexts evenly over [c/2, 3c/2], the default) or exponential "
                     "(an exponential distribution's quantiles, mean c: serving's long tail, the longest ~c ln 2b)")
          ->check(CLI::IsMember({"even", "exponential"}));
      sub.add_flag("--interleave", g.interleave,
                   "time the points in shuffled rounds (each timed step follows other work, as in serving) instead of "
                   "each point's runs back to back; --min-point-s is not used");
      sub.add_flag("--lead-in-self", g.lead_in_self,
                   "with --interleave: each point that is not a decode runs once untimed right before its timed run, so "
                   "it is timed after its own kind (as most chunk steps of a long-prompt run are)");
      sub.add_option("--lead-in", g.lead_in,
                     "with --interleave: untimed decode steps before each timed step (the grid's middle batch at its "
                     "middle context), so each timed step follows decode work as in serving")
          ->capture_default_str()
          ->check(CLI::Range(0, 100));
      sub.add_option("--threads", a->threads, "attention and BLAS threads (0 = all cores)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber);
      sub.add_option("--cpu-gemm", a->cpu_gemm,
                     "cpu backend: the dense products of a few rows through our small-rows loop (tuned) or plain "
                     "OpenBLAS (openblas; scripts/cpu-gemm-bench.sh compares the two)")
          ->capture_default_str()
          ->check(CLI::IsMember({"tuned", "openblas"}));
      sub.add_option("--seed", a->grid.seed, "seed of the random weights and prompts")->capture_default_str();
      sub.add_option("--sim-device", a->sim_device, "sim backend: roofline device")->capture_default_str();
      sub.add_option("--hardware", a->hardware,
                     "device preset the profile is for (prices steps beyond the grid; default cpu-2core on cpu, "
                     "from the GPU's name on cuda: h100, h200, ...)");
      sub.add_option("--json", a->json_path, "write figures and per-step samples to this JSON file");
      sub.footer(
          "Times real steps over a grid: one-sequence prefills (--prefill-lens), batched prefills\n"
          "(batch x --prompt-len rows, up to --max-rows), decodes (--batch x --contexts), chunked\n"
          "prefills at a context (--chunk-lens x --contexts), mixed steps (decodes plus a chunk) and,\n"
          "with --verify-k, verification steps (k + 1 drawn rows a sequence, --batch x --contexts).\n"
          "Each point keeps the median of --repeats runs. --json writes the profile (device, model\n"
          "shape hash, backend, commit, every point's shape and times): backend.sim_profile in a\n"
          "scenario calibrates the sim backend from it, and a profile of another model shape or\n"
          "device is refused there.\n\n"
          "Examples:\n"
          "  servelab profile --preset tiny\n"
          "  servelab profile --preset qwen2.5-0.5b --json results/profiles/qwen2.5-0.5b-cpu.json\n"
          "  servelab profile --model ./my-llama --threads 2 --batch 1,4,16 --contexts 64,512\n"
          "  servelab profile --for-scenario scenarios/quickstart.yaml --json quickstart-profile.json\n"
          "  servelab profile --preset tiny --verify-k 3 --draft-layers 1 --json tiny-spec-profile.json\n"
          "  servelab profile --backend cuda --preset llama2-7b --prefill-lens 512,4096 --batch 1,32,256 \\\n"
          "      --contexts 128,2048 --kv-gb 40 --json results/profiles/llama2-7b-h100.json");
      return [a] { return profile_main(*a); };
    });

}  // namespace
}  // namespace servelab::cli
