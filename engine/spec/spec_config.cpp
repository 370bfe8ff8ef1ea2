#include "engine/spec/spec_config.h"

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "engine/model/induction_weights.h"
#include "engine/spec/draft_weights.h"
#include "engine/spec/model_proposer.h"
#include "engine/spec/ngram_proposer.h"

namespace servelab {

const char* to_string(SpecMethod m) {
  switch (m) {
    case SpecMethod::ngram: return "ngram";
    case SpecMethod::self: return "self";
    case SpecMethod::draft_model: return "draft_model";
  }
  return "?";
}

void SpeculativeConfig::validate() const {
  if (num_speculative_tokens < 1 || num_speculative_tokens > 16)
    throw std::invalid_argument("speculative.num_speculative_tokens must be in [1, 16] (got " +
                                std::to_string(num_speculative_tokens) + ")");
  if (prompt_lookup_min < 1 || prompt_lookup_max < prompt_lookup_min)
    throw std::invalid_argument("speculative: need 1 <= prompt_lookup_min (" + std::to_string(prompt_lookup_min) +
                                ") <= prompt_lookup_max (" + std::to_string(prompt_lookup_max) + ")");
  if (method == SpecMethod::self && num_layers < 1)
    throw std::invalid_argument("speculative.num_layers must be >= 1 for method self (got " +
                                std::to_string(num_layers) + ")");
  if (method != SpecMethod::self && num_layers != 0)
    throw std::invalid_argument(std::string("speculative.num_layers is for method self (got method ") +
                                to_string(method) + ")");
  if (method == SpecMethod::draft_model && model.empty())
    throw std::invalid_argument("speculative.model must name a preset or a checkpoint folder for method draft_model");
  if (sim_acceptance) sim_acceptance->validate();
  if (method != SpecMethod::draft_model && !model.empty())
    throw std::invalid_argument(std::string("speculative.model is for method draft_model (got method ") +
                                to_string(method) + ")");
}

namespace {

ModelProposerOptions proposer_options(const ProposerTarget& target) {
  ModelProposerOptions o;
  o.max_model_len = target.max_model_len;
  o.max_num_seqs = target.max_num_seqs;
  o.max_num_batched_tokens = target.max_num_batched_tokens;
  return o;
}

int target_vocab(const ProposerTarget& target, const ModelConfig& fallback) {
  return target.vocab_size > 0 ? target.vocab_size : fallback.vocab_size;
}

void check_self_layers(int num_layers, int have) {
  if (num_layers >= have)
    throw std::invalid_argument("speculative.num_layers must be below the target's " + std::to_string(have) +
                                " layers (got " + std::to_string(num_layers) + ")");
}

/// The draft on the cpu backend, sharing the target's weights (self) or its own (draft_model).
std::unique_ptr<Proposer> make_cpu_proposer(const SpeculativeConfig& c, const ProposerTarget& target) {
  const ModelProposerOptions o = proposer_options(target);
  const int vocab = target_vocab(target, target.weights->config);
  if (c.method == SpecMethod::self) {
    check_self_layers(c.num_layers, target.weights->config.n_layers);
    auto w = std::make_shared<const ModelWeights>(first_layers(*target.weights, c.num_layers));
    return std::make_unique<ModelProposer>("self", std::move(w), vocab, o);
  }
  std::error_code ec;
  auto w = std::make_shared<const ModelWeights>(std::filesystem::is_directory(c.model, ec)
                                                    ? ModelWeights::load(c.model)
                                                    : preset_weights(c.model, preset(c.model), target.seed + 1));
  return std::make_unique<ModelProposer>("draft_model", std::move(w), vocab, o);
}

/// The draft as a CudaBackend on the target's GPU (one GPU, whatever the target's tensor
/// parallelism): self is the target preset's first num_layers layers (the same tensors: random
/// weights are keyed by name), draft_model its own preset (seed + 1) or folder, without the
/// target's residual scaling or quantization.
std::unique_ptr<Proposer> make_device_proposer(const SpeculativeConfig& c, const ProposerTarget& target) {
  BackendSpec d = *target.backend;
  d.tensor_parallel = 1;
  if (c.method == SpecMethod::self) {
    check_self_layers(c.num_layers, resolve_model_config(d.model).n_layers);
    d.first_layers = c.num_layers;
  } else {
    d.model = c.model;
    d.seed = target.seed + 1;
    d.first_layers = 0;
    d.residual_scale.reset();
    d.quantization = Quantization::none;
    d.dtype.reset();
  }
  std::unique_ptr<Backend> backend = make_backend(d);
  ModelProposerOptions o = proposer_options(target);
  o.kv_cache_bytes = target.device_draft_kv_bytes;
  const int vocab = target_vocab(target, backend->config());
  auto proposer = std::make_unique<ModelProposer>(c.method == SpecMethod::self ? "self" : "draft_model",
                                                  std::move(backend), vocab, o);
  // Its graphs captured and kernels loaded now, not in the first serving steps at each shape.
  const DraftWarmUpStats w = proposer->warm_up();
  if (w.rounds > 0)
    std::fprintf(stderr, "draft warm-up: %d rounds, %d steps of the %s draft, %.3f s\n", w.rounds, w.steps,
                 proposer->name(), w.seconds);
  return proposer;
}

}  // namespace

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& c, const ProposerTarget& target) {
  c.validate();
  if (c.method == SpecMethod::ngram) return std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max);
  if (target.weights) return make_cpu_proposer(c, target);
  if (target.backend && target.backend->kind == BackendKind::cuda) return make_device_proposer(c, target);
  throw std::invalid_argument(std::string("speculative method ") + to_string(c.method) +
                              " runs a draft model on backend cpu or cuda" +
                              (target.backend ? std::string(" (got backend ") + to_string(target.backend->kind) + ")"
                                              : std::string(": it needs the target's weights or backend")));
}

}  // namespace servelab
