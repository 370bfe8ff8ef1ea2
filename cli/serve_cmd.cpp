// servelab serve: the reference engine behind an OpenAI-compatible HTTP API (server/).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/backend/make_backend.h"
#include "loadgen/backend_spec.h"
#include "engine/model/tokenizer.h"
#include "server/echo_service.h"
#include "server/engine_service.h"
#include "server/http_server.h"
#include "loadgen/scenario.h"
#include "loadgen/sources.h"

namespace servelab::cli {
namespace {

struct ServeArgs {
  std::string model;     // folder
  std::string preset = "tiny";
  std::string backend = "cpu";
  std::string scenario;
  std::string strategy;  // label in the scenario; default its first
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  uint64_t seed = 0;
  int threads = 0;
  int io_threads = 1;
  int max_waiting = 256;
  size_t max_body_bytes = 4u << 20;
  // engine knobs (used without --scenario)
  std::string batching = "continuous";
  std::string kv = "paged";
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int batch_size = 8;
  int block_size = 16;
  double kv_cache_mb = 64;
  int max_model_len = 0;
  bool chunked_prefill = false;
  std::string sim_device;
  int device = 0;                       // cuda
  std::string dtype;                    // cuda: bf16 | f16; "" = the scenario's (default bf16)
  std::string quantization;             // none | fp8 | int4_awq | int4_gptq; "" = the scenario's (none)
  std::string kv_cache_dtype;           // auto | fp8; "" = the scenario's (auto)
  double gpu_memory_utilization = 0.0;  // cuda: > 0 sizes the KV arena from free GPU memory
  // multi-LoRA (vLLM's flags)
  bool enable_lora = false;
  std::vector<std::string> lora_modules;  // name=path, or {"name": ..., "path": ...}
  int max_loras = 1;
  int max_lora_rank = 16;
  int max_cpu_loras = 0;
  std::string speculative_config;  // vLLM's JSON; over the scenario strategy's speculative block
};

/// --lora-modules entries as (name, path): `name=path` or vLLM's JSON form {"name", "path"}.
std::vector<std::pair<std::string, std::string>> parse_lora_modules(const std::vector<std::string>& modules) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& m : modules) {
    if (!m.empty() && m.front() == '{') {
      const auto j = nlohmann::json::parse(m, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j.contains("path") || !j["name"].is_string() ||
          !j["path"].is_string())
        throw std::invalid_argument("--lora-modules " + m + ": the JSON form needs string \"name\" and \"path\"");
      out.emplace_back(j["name"].get<std::string>(), j["path"].get<std::string>());
      continue;
    }
    const auto eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size())
      throw std::invalid_argument("--lora-modules " + m + ": expected name=path");
    out.emplace_back(m.substr(0, eq), m.substr(eq + 1));
  }
  return out;
}

/// The engine config from flags (no scenario).
EngineConfig flags_engine_config(const ServeArgs& a, const ModelConfig& model) {
  EngineConfig c;
  if (a.batching == "continuous") c.sched.kind = BatchingKind::continuous;
  else if (a.batching == "static") c.sched.kind = BatchingKind::static_batch;
  else if (a.batching == "dynamic") c.sched.kind = BatchingKind::dynamic_batch;
  else throw std::invalid_argument("--batching must be continuous, static or dynamic (got " + a.batching + ")");
  c.sched.max_num_seqs = a.max_num_seqs;
  c.sched.max_num_batched_tokens = a.max_num_batched_tokens;
  c.sched.chunked_prefill = a.chunked_prefill;
  c.sched.batch_size = a.batch_size;
  c.sched.max_batch_size = a.batch_size;
  if (a.kv == "paged") c.kv.kind = KvKind::paged;
  else if (a.kv == "naive") c.kv.kind = KvKind::naive;
  else throw std::invalid_argument("--kv must be paged or naive (got " + a.kv + ")");
  c.kv.block_size = a.block_size;
  c.kv.max_model_len = a.max_model_len > 0 ? a.max_model_len : model.max_position;
  c.kv_cache_bytes = static_cast<int64_t>(a.kv_cache_mb * (1 << 20));
  c.validate();
  return c;
}

/// tokenizer_config.json's "chat_template" when it is a string, else "".
std::string read_chat_template(const std::string& dir) {
  std::ifstream in(dir + "/tokenizer_config.json");
  if (!in) return "";
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "";
  auto it = j.find("chat_template");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

/// One knob of a batching policy or KV allocator, given on the command line.
struct PolicyKnob {
  const char* flag;
  const char* applies_to;  ///< the --batching or --kv value it belongs to
  bool kv;                 ///< a --kv knob (else a --batching one)
};

/// Refuses what a scenario refuses: a knob of a policy that is not the one served
/// (`--batching static --chunked-prefill`, `--kv naive --block-size 32`), and engine flags beside
/// --scenario (its strategy sets them). Returns the message, or "" when the flags agree.
std::string check_serve_flags(const ServeArgs& a, const CLI::App& sub) {
  auto given = [&](const char* flag) { return sub.get_option(flag)->count() > 0; };
  if (!a.scenario.empty()) {
    for (const char* f : {"--batching", "--kv", "--max-num-seqs", "--max-num-batched-tokens", "--chunked-prefill",
                          "--batch-size", "--block-size", "--kv-cache-mb", "--max-model-len"})
      if (given(f)) return std::string(f) + " conflicts with --scenario (its strategy sets the engine; edit the scenario or drop " + f + ")";
    return "";
  }
  static const PolicyKnob knobs[] = {{"--max-num-seqs", "continuous", false},
                                     {"--max-num-batched-tokens", "continuous", false},
                                     {"--chunked-prefill", "continuous", false},
                                     {"--block-size", "paged", true}};
  for (const PolicyKnob& k : knobs) {
    const std::string& chosen = k.kv ? a.kv : a.batching;
    if (given(k.flag) && chosen != k.applies_to)
      return std::string(k.flag) + " applies to " + (k.kv ? "--kv " : "--batching ") + k.applies_to + ", not " +
             (k.kv ? "--kv " : "--batching ") + chosen;
  }
  if (!a.enable_lora)
    for (const char* f : {"--lora-modules", "--max-loras", "--max-lora-rank", "--max-cpu-loras"})
      if (given(f)) return std::string(f) + " needs --enable-lora";
  if (a.enable_lora && a.backend == "echo") return "--enable-lora needs an engine backend (cpu, cuda or sim), not echo";
  if (given("--batch-size") && a.batching == "continuous")
    return "--batch-size applies to --batching static or dynamic, not --batching continuous (use --max-num-seqs)";
  if (!a.model.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(a.model, ec))
      return "--model " + a.model + ": no such folder (a Hugging Face model folder with config.json, "
             "*.safetensors and tokenizer.json; for random weights use --preset NAME)";
  }
  return "";
}

/// "continuous batching (max_num_seqs 64, max_num_batched_tokens 2048), paged KV (block 16, 64 MiB)"
std::string describe_engine(const EngineConfig& c) {
  std::ostringstream o;
  o << to_string(c.sched.kind) << " batching (";
  switch (c.sched.kind) {
    case BatchingKind::continuous:
      o << "max_num_seqs " << c.sched.max_num_seqs << ", max_num_batched_tokens " << c.sched.max_num_batched_tokens
        << (c.sched.chunked_prefill ? ", chunked prefill" : "");
      break;
    case BatchingKind::static_batch: o << "batch_size " << c.sched.batch_size; break;
    case BatchingKind::dynamic_batch: o << "max_batch_size " << c.sched.max_batch_size; break;
  }
  o << "), " << to_string(c.kv.kind) << " KV (";
  if (c.kv.kind == KvKind::paged) o << "block " << c.kv.block_size << ", ";
  o << c.kv_cache_bytes / double(1 << 20) << " MiB, max_model_len " << c.kv.max_model_len << ")";
  return o.str();
}

int serve_main(ServeArgs a, const CLI::App& sub) {
  using namespace server;
  if (const std::string bad = check_serve_flags(a, sub); !bad.empty()) {
    std::cerr << "servelab serve: error: " << bad << "\n";
    return 2;
  }
  BackendSpec spec;
  EngineConfig econfig;
  bool have_scenario = !a.scenario.empty();
  std::optional<StrategySpec> strategy;  // the scenario's: its speculative block applies too
  int gpu_rows = 0, gpu_seqs = 0;  // a step's activations, with gpu_memory_utilization
  if (have_scenario) {
    Scenario sc;
    try {
      sc = load_scenario(a.scenario);
    } catch (const ScenarioError& e) {
      for (const auto& m : e.messages) std::cerr << m << "\n";
      return 2;
    }
    const StrategySpec* st = &sc.strategies.front();
    for (const auto& s : sc.strategies)
      if (s.label == a.strategy) st = &s;
    if (!a.strategy.empty() && st->label != a.strategy) {
      std::cerr << "servelab serve: --strategy " << a.strategy << " is not in " << a.scenario << "\n";
      return 2;
    }
    econfig = engine_config(sc, *st);
    strategy = *st;
    spec = backend_spec(sc);
    spec.quantization = strategy_quantization(sc, *st);
    spec.kv_cache_dtype = strategy_kv_cache_dtype(sc, *st);
    if (sc.engine.gpu_memory_utilization > 0) {  // sized once the backend is built (below)
      a.gpu_memory_utilization = sc.engine.gpu_memory_utilization;
      gpu_rows = max_step_rows(sc, *st);
      gpu_seqs = max_step_seqs(*st);
    }
    if (!sc.model.path.empty()) a.model = sc.model.path;
  } else {
    spec.model = a.model.empty() ? a.preset : a.model;
    spec.seed = a.seed;
    spec.threads = a.threads;
    spec.device = a.device;
    if (!a.sim_device.empty()) spec.sim_device = SimDevice::preset(a.sim_device);
  }
  if (!a.speculative_config.empty()) {
    try {
      if (!strategy) strategy = StrategySpec{};
      strategy->speculative = speculative_config_from_json(a.speculative_config);
    } catch (const std::invalid_argument& e) {
      std::cerr << "servelab serve: error: " << e.what() << "\n";
      return 2;
    }
  }
  const bool echo = a.backend == "echo";
  if (!echo && !have_scenario) spec.kind = parse_backend_kind(a.backend);
  if (strategy && strategy->speculative && strategy->speculative->sim_acceptance && (echo || spec.kind != BackendKind::sim)) {
    std::cerr << "servelab serve: error: --speculative-config: sim_acceptance applies to --backend sim (got "
              << (echo ? std::string("echo") : to_string(spec.kind)) << "; a real backend measures its acceptance)\n";
    return 2;
  }
  if (!a.dtype.empty()) spec.storage_dtype = parse_dtype(a.dtype);  // over the scenario's backend.dtype
  if (!a.quantization.empty()) spec.quantization = parse_quantization(a.quantization);
  if (!a.kv_cache_dtype.empty()) spec.kv_cache_dtype = parse_kv_cache_dtype(a.kv_cache_dtype);
  const ModelConfig model = resolve_model_config(spec.model);

  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;
  if (!a.model.empty()) {
    tokenizer = load_tokenizer_from_dir(a.model);
    chat_template = read_chat_template(a.model);
  }
  if (!tokenizer) {
    std::optional<TokenId> eos;
    if (model.eos_token >= 0) eos = model.eos_token;
    tokenizer = make_byte_tokenizer(std::max(model.vocab_size, 256), eos);
  }

  ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.api_key = a.api_key;
  o.io_threads = a.io_threads;
  o.max_body_bytes = a.max_body_bytes;
  o.model_name = !a.served_model_name.empty() ? a.served_model_name
                 : !a.model.empty()           ? std::filesystem::path(a.model).filename().string()
                                              : model.name;
  o.chat_template = chat_template;
  o.render_chat = [](std::span<const ChatMessage> m, const std::string& t) { return render_chat(m, t, true); };

  ServerMetrics metrics(o.model_name);
  std::unique_ptr<GenerationService> service;
  if (echo) {
    service = std::make_unique<EchoService>(model, metrics);
  } else {
    spec.validate();
    if (!have_scenario) {
      econfig = flags_engine_config(a, model);
      gpu_rows = max_step_rows(econfig.sched, econfig.kv.max_model_len);
      gpu_seqs = max_step_seqs(econfig.sched);
    }
    const BackendFactory backends(spec);
    std::unique_ptr<Backend> backend = backends.make();
    if (a.gpu_memory_utilization > 0) {
      LoraConfig lora = econfig.lora;  // the adapters' pool comes out of the same share
      if (a.enable_lora) lora = LoraConfig{.enabled = true, .max_loras = a.max_loras, .max_lora_rank = a.max_lora_rank};
      econfig.kv_cache_bytes = kv_bytes_for_gpu_utilization(*backend, a.gpu_memory_utilization, gpu_rows, gpu_seqs, lora);
      std::cout << "servelab serve: KV cache " << econfig.kv_cache_bytes / double(1 << 30) << " GiB (gpu_memory_utilization "
                << a.gpu_memory_utilization << ")" << std::endl;
    }
    if (a.enable_lora) {  // the adapters are read now: a bad one stops the start, naming its folder
      econfig.lora.enabled = true;
      econfig.lora.max_loras = a.max_loras;
      econfig.lora.max_lora_rank = a.max_lora_rank;
      econfig.lora.max_cpu_loras = a.max_cpu_loras;
      try {
        econfig.validate();
        o.loras = std::make_shared<LoraRegistry>(model, econfig.lora);
        for (const auto& [name, path] : parse_lora_modules(a.lora_modules)) o.loras->add(name, path);
      } catch (const std::exception& e) {
        std::cerr << "servelab serve: error: " << e.what() << "\n";
        return 2;
      }
    }
    EngineServiceOptions so;
    so.max_waiting = a.max_waiting;
    so.pace_predicted = spec.kind == BackendKind::sim;
    auto engine = std::make_unique<Engine>(econfig, std::move(backend));
    if (strategy) {
      try {
        apply_strategy(*engine, *strategy, backends);
      } catch (const std::invalid_argument& e) {  // e.g. self-speculation on a backend without host weights
        std::cerr << "servelab serve: error: " << e.what() << "\n";
        return 2;
      }
    }
    service = std::make_unique<EngineService>(std::move(engine), metrics, so);
  }
  HttpServer srv(o, *service, *tokenizer, metrics);
  srv.handle_signals = true;
  srv.start();
  std::cout << "servelab serve: " << o.model_name << " (" << (echo ? "echo responder" : to_string(spec.kind))
            << (echo ? "" : ", " + describe_engine(econfig))
            << (o.loras ? ", LoRA (max_loras " + std::to_string(econfig.lora.max_loras) + ", max_lora_rank " +
                              std::to_string(econfig.lora.max_lora_rank) + ", " + std::to_string(o.loras->list().size()) +
                              " adapters)"
                        : std::string())
            << (strategy && strategy->speculative
                    ? std::string(", speculative ") + to_string(strategy->speculative->method) + " (k <= " +
                          std::to_string(strategy->speculative->num_speculative_tokens) + ")"
                    : std::string())
            << ", tokenizer " << tokenizer->name() << ") on http://" << o.host << ":" << srv.port()
            << "  (SIGTERM/Ctrl-C drains and exits)" << std::endl;
  srv.wait();
  std::cout << "servelab serve: drained, exiting" << std::endl;
  return 0;
}

const Registrar register_serve(
    "serve", "Serve the engine over an OpenAI-compatible HTTP API (completions, chat, SSE, /metrics)",
    [](CLI::App& sub) -> CommandMain {
      auto a = std::make_shared<ServeArgs>();
      auto* model = sub.add_option("--model", a->model, "Hugging Face model folder (config.json, safetensors, tokenizer.json)");
      sub.add_option("--preset", a->preset, "Model preset with random weights (default tiny)")->excludes(model);
      sub.add_option("--backend", a->backend, "cpu | cuda | sim (paced in real time) | echo (no model: answers at once; for load-generator benchmarks)");
      sub.add_option("--device", a->device, "cuda: device ordinal (default 0)")->check(CLI::NonNegativeNumber);
      sub.add_option("--dtype", a->dtype, "cuda: weights, activations and KV in bf16 (default) or f16")
          ->check(CLI::IsMember({"bf16", "f16"}));
      sub.add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                     "cuda: size the KV cache from this share of the GPU's memory (vLLM's rule) instead of --kv-cache-mb")
          ->check(CLI::Range(0.0, 1.0));
      sub.add_option("--quantization", a->quantization, "cpu, sim: weight format (quantized on load from bf16)")
          ->check(CLI::IsMember({"none", "fp8", "int4_awq", "int4_gptq"}));
      sub.add_option("--kv-cache-dtype", a->kv_cache_dtype, "KV element type, auto or fp8 (E4M3 + scales; cpu, sim; cuda on one GPU)")
          ->check(CLI::IsMember({"auto", "fp8"}));
      sub.add_option("--scenario", a->scenario, "Take model, backend and engine settings from a scenario")->check(CLI::ExistingFile);
      sub.add_option("--strategy", a->strategy, "With --scenario: the strategy label to serve (default the first)");
      sub.add_option("--host", a->host, "Address to bind (default 127.0.0.1: loopback only)");
      sub.add_option("--port", a->port, "Port (default 8000; 0 = any free port)");
      sub.add_option("--api-key", a->api_key, "Require Authorization: Bearer KEY on /v1/* (401 otherwise)");
      sub.add_option("--served-model-name", a->served_model_name, "Model name in /v1/models and responses");
      sub.add_option("--seed", a->seed, "Seed of the preset's random weights");
      sub.add_option("--threads", a->threads, "CPU backend threads (0 = all cores)");
      sub.add_option("--io-threads", a->io_threads, "HTTP threads (default 1)");
      sub.add_option("--max-waiting", a->max_waiting, "Requests waiting beyond the running batch before 429 (default 256)");
      sub.add_option("--max-body-bytes", a->max_body_bytes, "Larger request bodies get 413 (default 4 MiB)");
      sub.add_option("--batching", a->batching, "continuous | static | dynamic");
      sub.add_option("--kv", a->kv, "paged | naive");
      sub.add_option("--max-num-seqs", a->max_num_seqs, "continuous: running sequences");
      sub.add_option("--max-num-batched-tokens", a->max_num_batched_tokens, "continuous: tokens per step");
      sub.add_flag("--chunked-prefill", a->chunked_prefill, "continuous: split long prompts over steps");
      sub.add_option("--batch-size", a->batch_size, "static/dynamic: batch size");
      sub.add_option("--block-size", a->block_size, "paged: tokens per block");
      sub.add_option("--kv-cache-mb", a->kv_cache_mb, "KV arena in MiB (default 64)");
      sub.add_option("--max-model-len", a->max_model_len, "Prompt + output cap (default the model's)");
      sub.add_option("--sim-device", a->sim_device, "sim: roofline device preset");
      sub.add_flag("--enable-lora", a->enable_lora, "Serve LoRA adapters: a request's `model` names one (continuous batching)");
      sub.add_option("--lora-modules", a->lora_modules,
                     "Adapters to load at start, name=path (a PEFT folder) or '{\"name\": ..., \"path\": ...}'")
          ->expected(1, -1);
      sub.add_option("--max-loras", a->max_loras, "Adapters running at once (backend slots; default 1)")->check(CLI::Range(1, 4096));
      sub.add_option("--max-lora-rank", a->max_lora_rank, "Largest adapter rank accepted (default 16)")->check(CLI::Range(1, 1024));
      sub.add_option("--max-cpu-loras", a->max_cpu_loras, "Adapters kept in host memory (default --max-loras)")
          ->check(CLI::NonNegativeNumber);
      sub.add_option("--speculative-config", a->speculative_config,
                     "Speculative decoding, vLLM's JSON: '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}' "
                     "(methods ngram, self with num_layers, draft_model with model; on --backend sim, self and "
                     "draft_model take sim_acceptance: {\"per_position\": [p1, ...]} or {\"summary\": FILE}, either with "
                     "\"requests\": FILE, request_acceptance.py's per-request counts)");
      sub.footer(
          "Examples:\n"
          "  servelab serve --preset tiny --port 8000\n"
          "  servelab serve --model models/qwen3 --backend cpu --api-key secret\n"
          "  servelab serve --scenario scenarios/quickstart.yaml --strategy continuous-paged\n"
          "  servelab serve --backend echo --port 9000      # fast responder for bench-http-driver.sh\n"
          "  servelab serve --preset tiny --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'\n"
          "  servelab serve --backend sim --preset llama2-7b --speculative-config \\\n"
          "      '{\"method\": \"self\", \"num_layers\": 1, \"num_speculative_tokens\": 2, \"sim_acceptance\": {\"per_position\": [0.9, 0.8]}}'\n"
          "  servelab serve --preset tiny --enable-lora --max-loras 4 --lora-modules sql=adapters/sql chat=adapters/chat\n"
          "Then: curl localhost:8000/v1/completions -d '{\"prompt\": \"hi\", \"max_tokens\": 8, \"stream\": true}'");
      const CLI::App* app = &sub;  // outlives the run: main() owns it
      return [a, app] { return serve_main(*a, *app); };
    });

}  // namespace
}  // namespace servelab::cli
