#include "engine/spec/spec_config.h"

#include <filesystem>
#include <stdexcept>
#include <string>

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
  if (method != SpecMethod::draft_model && !model.empty())
    throw std::invalid_argument(std::string("speculative.model is for method draft_model (got method ") +
                                to_string(method) + ")");
}

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& c, const ProposerTarget& target) {
  c.validate();
  if (c.method == SpecMethod::ngram) return std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max);
  if (!target.weights)
    throw std::invalid_argument(std::string("speculative method ") + to_string(c.method) +
                                " runs a draft model on the cpu backend: it needs the target's weights (backend cpu)");
  ModelProposerOptions o;
  o.max_model_len = target.max_model_len;
  const int vocab = target.vocab_size > 0 ? target.vocab_size : target.weights->config.vocab_size;
  if (c.method == SpecMethod::self) {
    const int have = target.weights->config.n_layers;
    if (c.num_layers >= have)
      throw std::invalid_argument("speculative.num_layers must be below the target's " + std::to_string(have) +
                                  " layers (got " + std::to_string(c.num_layers) + ")");
    auto w = std::make_shared<const ModelWeights>(first_layers(*target.weights, c.num_layers));
    return std::make_unique<ModelProposer>("self", std::move(w), vocab, o);
  }
  std::error_code ec;
  auto w = std::make_shared<const ModelWeights>(std::filesystem::is_directory(c.model, ec)
                                                    ? ModelWeights::load(c.model)
                                                    : ModelWeights::random(preset(c.model), target.seed + 1));
  return std::make_unique<ModelProposer>("draft_model", std::move(w), vocab, o);
}

}  // namespace servelab
