#include "engine/spec/spec_config.h"

#include <stdexcept>
#include <string>

#include "engine/spec/ngram_proposer.h"

namespace servelab {

const char* to_string(SpecMethod m) {
  switch (m) {
    case SpecMethod::ngram: return "ngram";
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
}

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& c) {
  c.validate();
  return std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max);
}

}  // namespace servelab
