#pragma once
// Proposer: guesses the tokens that follow a sequence (speculative decoding). The engine asks it
// before each step for the running sequences about to draw, puts the guesses in
// Sequence::spec_tokens (and, from a proposer that samples a model, their distributions in
// Sequence::spec_probs), verifies them all in that one step (one draw per position) and keeps
// the ones the draws confirm. Greedy, a draft stands exactly when it is the target's argmax; at a
// temperature, a point-mass draft (n-gram) stands when the target's keyed draw equals it, and a
// sampled draft is accepted by rejection sampling against its q (sampler.h: verify_draft). Either
// way the output is distributed as the run without drafts; greedy it is the same tokens.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/request.h"

namespace servelab {

/// One sequence to draft for: at most max_k (>= 1) tokens after seq's accepted tokens, appended
/// to *tokens; a proposer that samples a distribution appends one row of vocab probabilities per
/// token to *probs (the q its token was drawn from), or none at all (point masses).
struct DraftTask {
  const Sequence* seq = nullptr;
  int max_k = 1;
  std::vector<TokenId>* tokens = nullptr;
  std::vector<float>* probs = nullptr;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual const char* name() const = 0;
  /// Appends up to max_k (>= 1) tokens likely to follow seq's accepted tokens to `draft`
  /// (empty when it has no guess).
  virtual void propose(const Sequence& seq, int max_k, std::vector<TokenId>& draft) = 0;
  /// Drafts for every task of one engine step (a model proposer batches them). Default: propose()
  /// per task, point masses.
  virtual void propose_batch(std::span<const DraftTask> tasks) {
    for (const DraftTask& t : tasks) propose(*t.seq, t.max_k, *t.tokens);
  }
  /// The sequence left the engine (finished, aborted, rejected): drop what is kept for it.
  virtual void forget(uint64_t seq_id) { (void)seq_id; }
  /// The seconds the last propose_batch is priced at, for a proposer that only predicts its
  /// cost (the sim's, engine/spec/sim_proposer.h); none: the engine measures its wall time.
  virtual std::optional<double> priced_seconds() const { return std::nullopt; }
  /// Of the last propose_batch's seconds, those spent catching the draft up on rows beyond the
  /// <= 2 a sequence has when it drafted at its previous step (a rejection's correction, or the
  /// last accepted draft and the bonus token): what a step that drafts after plain steps pays
  /// once and steady drafting would not pay again (StepOutcome::spec_catch_up_s, steps.jsonl's
  /// spec_decode.catch_up_s). 0 for a proposer with no model to catch up.
  virtual double catch_up_excess_s() const { return 0.0; }
  /// The rows the draft would compute before its first draft for seq now: the tokens its K/V
  /// lacks (all of them for a sequence it never drafted for; 1-2 after drafting at the previous
  /// step). The measured rule's probes draft for the sequences with the fewest. 0 for a proposer
  /// with no model to catch up.
  virtual int catch_up_rows(const Sequence& seq) const { (void)seq; return 0; }
};

}  // namespace servelab
