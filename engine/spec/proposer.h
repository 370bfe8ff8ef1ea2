#pragma once
// Proposer: guesses the tokens that follow a sequence (speculative decoding). The engine asks it
// before each step for the running sequences about to draw, puts the guesses in
// Sequence::spec_tokens, verifies them all in that one step (one draw per position) and keeps
// the ones the draws confirm: greedy or sampled, the output is what the step-by-step run would
// produce, because every draw is keyed by (seed, sample, position), not by the step it runs in.
#include <vector>

#include "engine/request.h"

namespace servelab {

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual const char* name() const = 0;
  /// Appends up to max_k (>= 1) tokens likely to follow seq's accepted tokens to `draft`
  /// (empty when it has no guess).
  virtual void propose(const Sequence& seq, int max_k, std::vector<TokenId>& draft) = 0;
};

}  // namespace servelab
