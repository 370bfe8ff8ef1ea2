#pragma once
// SpeculativeConfig: a strategy's `speculative:` block (the scenario's, or serve's flags) and the
// proposer it builds.
#include <memory>
#include <string>

#include "engine/spec/proposer.h"

namespace servelab {

enum class SpecMethod { ngram };
const char* to_string(SpecMethod m);  ///< "ngram"

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::ngram;
  int num_speculative_tokens = 3;  ///< drafts per step and sequence, >= 1
  int prompt_lookup_min = 1;       ///< ngram: shortest suffix matched
  int prompt_lookup_max = 3;       ///< ngram: longest suffix matched
  /// Throws std::invalid_argument naming the field.
  void validate() const;
};

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config);

}  // namespace servelab
