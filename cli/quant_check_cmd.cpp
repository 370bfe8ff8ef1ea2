// `servelab quant-check`: accuracy of each quantized format against the unquantized model over
// teacher-forced positions (engine/backend/quant_check.h): on the CPU backend (the formats'
// numerical reference, every scale layout, synthesized outliers) or on the cuda backend (the GPU's
// own kernels, each format it runs).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "engine/backend/make_backend.h"
#include "engine/backend/massive_activations.h"
#include "engine/backend/quant_check.h"
#include "engine/model/config.h"
#include "engine/model/quantize_weights.h"
#include "engine/model/residual_scale.h"
#include "engine/model/weights.h"

namespace servelab::cli {
namespace {

struct QuantCheckArgs {
  std::string backend = "cpu";
  int device = 0;
  std::string preset = "tiny";
  std::string model_dir;
  uint64_t seed = 0;
  int positions = 1024;
  int sequences = 8;
  int threads = 0;
  int outlier_channels = 0;
  float outlier_scale = 100.0f;
  int massive_tokens = 0;
  int massive_channels = 2;
  float massive_scale = 1e4f;
  double massive_rate = 0.02;
  float residual_scale = 1.0f;
  std::string json;
};

/// The formats the cuda backend runs, each against its bf16 twin: vLLM's dynamic FP8, FP8 with
/// per-channel weights and per-token activations, INT4 AWQ- and GPTQ-style, the FP8 KV cache alone
/// and with per-channel FP8.
std::vector<BackendVariant> cuda_variants(const BackendSpec& base) {
  const ModelConfig c = spec_model_config(base);
  const std::string gs = "-g" + std::to_string(int4_group_size(c));
  struct F {
    std::string label;
    Quantization q;
    bool per_channel;
    KvCacheDType kv;
  };
  const std::vector<F> formats = {{"fp8-tensor", Quantization::fp8, false, KvCacheDType::auto_dtype},
                                  {"fp8-channel-token", Quantization::fp8, true, KvCacheDType::auto_dtype},
                                  {"int4_awq" + gs, Quantization::int4_awq, false, KvCacheDType::auto_dtype},
                                  {"int4_gptq" + gs, Quantization::int4_gptq, false, KvCacheDType::auto_dtype},
                                  {"kvfp8", Quantization::none, false, KvCacheDType::fp8},
                                  {"fp8-channel-token+kvfp8", Quantization::fp8, true, KvCacheDType::fp8}};
  std::vector<BackendVariant> v;
  for (const F& f : formats) {
    BackendSpec spec = base;
    spec.quantization = f.q;
    spec.fp8_per_channel = f.per_channel;
    spec.kv_cache_dtype = f.kv;
    v.push_back({{f.label, scheme_for_model(f.q, c, f.per_channel), f.kv}, [spec] { return make_backend(spec); }});
  }
  return v;
}

/// quant-check on the cuda backend: the preset drawn on the GPU (or the folder loaded) in bf16,
/// against each format it runs. Outliers and massive activations are synthesized into host
/// weights, so they are cpu-only.
void quant_check_cuda(const QuantCheckArgs& a, std::vector<QuantAccuracy>& results, ModelConfig& config) {
  if (a.outlier_channels > 0 || a.massive_tokens > 0)
    throw std::invalid_argument("--outlier-channels and --massive-tokens build their features into host weights: use "
                                "--backend cpu (the cuda backend draws its weights on the GPU)");
  BackendSpec spec;
  spec.kind = BackendKind::cuda;
  spec.model = a.model_dir.empty() ? a.preset : a.model_dir;
  spec.seed = a.seed;
  spec.device = a.device;
  if (a.residual_scale != 1.0f) spec.residual_scale = ResidualScale{0, a.residual_scale};
  spec.validate();
  config = spec_model_config(spec);
  QuantCheckOptions o;
  o.n_positions = a.positions;
  o.n_sequences = a.sequences;
  o.seed = a.seed;
  results = quant_check_backends(config, [spec] { return make_backend(spec); }, cuda_variants(spec), o);
}

int quant_check_main(const QuantCheckArgs& a) {
  if (a.backend != "cpu" && a.backend != "cuda") {
    std::cerr << "servelab quant-check: --backend must be cpu or cuda (got '" << a.backend
              << "'; the sim has no weights)\n";
    return 2;
  }
  ModelConfig config;
  QuantCheckOptions o;  // the cpu run's; its massive tokens are reported
  std::vector<QuantAccuracy> results;
  std::string reference = "the same weights unquantized (fp32 compute, fp32 KV) on the cpu backend";
  try {
    if (a.backend == "cuda") {
      quant_check_cuda(a, results, config);
      reference = "the same weights in bf16 (bf16 KV) on the cuda backend, " + cuda_device_name(a.device);
    } else {
      ModelWeights w = a.model_dir.empty() ? ModelWeights::random(preset(a.preset), a.seed) : ModelWeights::load(a.model_dir);
      if (a.outlier_channels > 0) add_outlier_channels(w, a.outlier_channels, a.outlier_scale, a.seed);
      if (a.residual_scale != 1.0f) scale_residual_branches(w, 0, a.residual_scale);
      if (a.massive_tokens > 0)
        o.massive_tokens = add_massive_activations(w, {a.massive_tokens, a.massive_channels, a.massive_scale}, a.seed);
      o.massive_rate = a.massive_tokens > 0 ? a.massive_rate : 0.0;
      o.n_positions = a.positions;
      o.n_sequences = a.sequences;
      o.seed = a.seed;
      o.n_threads = a.threads;
      config = w.config;
      results = quant_check(w, default_quant_variants(w.config), o);
    }
  } catch (const std::exception& e) {
    std::cerr << "servelab quant-check: " << e.what() << "\n";
    return 2;
  }
  std::cout << "quant-check: " << config.name << " on " << a.backend << ", " << results.front().n_positions
            << " positions, seed " << a.seed;
  if (a.outlier_channels > 0) std::cout << ", " << a.outlier_channels << " outlier channels x" << a.outlier_scale;
  if (a.residual_scale != 1.0f) std::cout << ", residual branches x" << a.residual_scale;
  if (a.massive_tokens > 0)
    std::cout << ", " << a.massive_tokens << " massive tokens (" << a.massive_channels << " FFN channels x" << a.massive_scale
              << ", " << a.massive_rate * 100 << "% of positions)";
  std::cout << "\n  reference: " << reference << "\n";
  const bool massive = a.massive_tokens > 0;
  std::printf("  %-26s %9s %8s%s %10s %10s %11s %9s\n", "format", "bytes/w", "top-1", massive ? "  others" : "", "mean KL",
              "max KL", "max |dlogit|", "rel err");
  nlohmann::json j = {{"model", config.name}, {"backend", a.backend}, {"reference", reference}, {"seed", a.seed},
                      {"positions", results.front().n_positions},
                      {"outlier_channels", a.outlier_channels}, {"outlier_scale", a.outlier_scale},
                      {"residual_scale", a.residual_scale}, {"massive_tokens", o.massive_tokens},
                      {"massive_channels", massive ? a.massive_channels : 0}, {"massive_scale", massive ? a.massive_scale : 0.0f},
                      {"massive_rate", o.massive_rate}, {"formats", nlohmann::json::array()}};
  for (const QuantAccuracy& r : results) {
    std::printf("  %-26s %9.3f %8.4f", r.variant.label.c_str(), r.linear_bytes_per_weight, r.top1_agreement);
    if (massive) std::printf(" %7.4f", r.top1_agreement_other);
    std::printf(" %10.2e %10.2e %11.4f %9.4f\n", r.mean_kl, r.max_kl, r.max_logit_error, r.rel_logit_error);
    j["formats"].push_back({{"label", r.variant.label}, {"scheme", r.variant.scheme.describe()},
                            {"kv_cache_dtype", to_string(r.variant.kv_cache_dtype)},
                            {"linear_bytes_per_weight", r.linear_bytes_per_weight}, {"top1_agreement", r.top1_agreement},
                            {"top1_agreement_others", r.top1_agreement_other},
                            {"mean_kl", r.mean_kl}, {"max_kl", r.max_kl}, {"max_logit_error", r.max_logit_error},
                            {"rel_logit_error", r.rel_logit_error}});
  }
  if (!a.json.empty()) {
    std::ofstream out(a.json);
    out << j.dump(2) << "\n";
    if (!out) {
      std::cerr << "servelab quant-check: cannot write " << a.json << "\n";
      return 2;
    }
  }
  return 0;
}

const Registrar reg(
    "quant-check", "Accuracy of each quantized weight and KV format against the unquantized model (cpu or cuda backend)",
    [](CLI::App& sub) -> CommandMain {
      auto a = std::make_shared<QuantCheckArgs>();
      sub.add_option("--backend", a->backend,
                     "cpu (the formats' reference: every scale layout, synthesized outliers) or cuda (the GPU's own "
                     "kernels, each format it runs, against bf16 on the same GPU)")
          ->capture_default_str();
      sub.add_option("--device", a->device, "cuda: the GPU")->capture_default_str();
      auto* p = sub.add_option("--preset", a->preset, "model preset with random weights")->capture_default_str();
      sub.add_option("--model", a->model_dir, "Hugging Face folder (unquantized)")->excludes(p);
      sub.add_option("--seed", a->seed, "seed of the weights, token streams and outlier channels")->capture_default_str();
      sub.add_option("--positions", a->positions, "positions compared")->capture_default_str();
      sub.add_option("--sequences", a->sequences, "token streams run side by side")->capture_default_str();
      sub.add_option("--threads", a->threads, "cpu backend threads (0 = all cores)");
      sub.add_option("--outlier-channels", a->outlier_channels,
                     "give N hidden channels of every RMSNorm weight a larger magnitude (outlier features)");
      sub.add_option("--outlier-scale", a->outlier_scale, "their magnitude factor")->capture_default_str();
      sub.add_option("--residual-scale", a->residual_scale,
                     "multiply every layer's attention-output and down projections (the layers' share of the residual stream)")
          ->capture_default_str();
      sub.add_option("--massive-tokens", a->massive_tokens,
                     "give N token ids massive activations in a few FFN channels of every layer (0: none)");
      sub.add_option("--massive-channels", a->massive_channels, "FFN channels per layer they drive")->capture_default_str();
      sub.add_option("--massive-scale", a->massive_scale, "their value at those tokens, x the usual one")->capture_default_str();
      sub.add_option("--massive-rate", a->massive_rate, "share of stream positions that are massive tokens")
          ->capture_default_str();
      sub.add_option("--json", a->json, "write the figures to this file");
      sub.footer("Examples:\n  servelab quant-check --preset tiny --positions 1024 --outlier-channels 4 --outlier-scale 100\n"
                 "  servelab quant-check --backend cuda --preset llama2-7b --positions 1024");
      return [a] { return quant_check_main(*a); };
    });

}  // namespace
}  // namespace servelab::cli
