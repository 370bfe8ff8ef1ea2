#pragma once
// The grammar engine behind the engine's TokenConstraint seam (engine/request.h): one
// GrammarMatcher per request. ConstraintCompiler builds a tokenizer's token table once (lazily,
// on the first constrained request) and compiles each request's constraint against it.
#include <memory>
#include <mutex>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/request_constraint.h"
#include "engine/model/tokenizer.h"
#include "engine/request.h"

namespace servelab::grammar {

/// Masks from a GrammarMatcher. A draft is fed, masked after, and rolled back. Once the grammar
/// has ended (eos taken), only eos stays allowed (a request with ignore_eos keeps drawing it).
class GrammarConstraint final : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const CompiledGrammar> grammar) : matcher_(std::move(grammar)) {}
  void fill_mask(std::span<const TokenId> draft, uint32_t* words) override;
  void accept(TokenId t) override;
  /// The jump-forward string (GrammarMatcher::find_jump_forward_string) as tokens: at each point
  /// the longest token that spells a prefix of what is left and that the grammar takes.
  std::vector<TokenId> forced_tokens(int max_tokens) override;
  const GrammarMatcher& matcher() const { return matcher_; }

 private:
  GrammarMatcher matcher_;
};

/// Compiles constraints for one tokenizer and model vocabulary (thread-safe).
class ConstraintCompiler {
 public:
  /// n_vocab: the model's logits row (masks have (n_vocab + 31) / 32 words).
  ConstraintCompiler(const Tokenizer& tokenizer, int n_vocab) : tokenizer_(tokenizer), n_vocab_(n_vocab) {}
  /// Throws GrammarError for a constraint the engine does not support (naming the construct).
  std::shared_ptr<TokenConstraint> make(const ConstraintSpec& spec);

 private:
  const Tokenizer& tokenizer_;
  int n_vocab_;
  std::mutex mu_;
  std::shared_ptr<TokenTable> table_;
};

}  // namespace servelab::grammar
