#pragma once
// Prompt lookup (n-gram) proposer, as vLLM's `ngram` method: find the latest earlier occurrence
// of the sequence's last n tokens (n from max_n down to min_n) in its own tokens, and propose the
// tokens that followed it. No model; pays off where outputs copy spans of their context
// (editing, summarization, code).
#include "engine/spec/proposer.h"

namespace servelab {

class NgramProposer final : public Proposer {
 public:
  /// Throws std::invalid_argument unless 1 <= min_n <= max_n.
  NgramProposer(int min_n, int max_n);
  const char* name() const override { return "ngram"; }
  void propose(const Sequence& seq, int max_k, std::vector<TokenId>& draft) override;

 private:
  int min_n_, max_n_;
};

}  // namespace servelab
