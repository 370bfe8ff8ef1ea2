#include "engine/grammar/grammar_constraint.h"

#include <algorithm>

namespace servelab::grammar {

void GrammarConstraint::fill_mask(std::span<const TokenId> draft, uint32_t* words) {
  const int n_words = matcher_.n_words();
  if (matcher_.is_terminated()) {
    std::fill(words, words + n_words, 0u);
    if (auto eos = matcher_.grammar().tokens().eos()) words[*eos / 32] |= 1u << (*eos % 32);
    else std::fill(words, words + n_words, ~0u);  // no eos to repeat: nothing left to constrain
    return;
  }
  int fed = 0;
  for (TokenId t : draft) {
    if (!matcher_.accept_token(t)) break;  // the engine trims drafts first; be safe anyway
    ++fed;
  }
  matcher_.fill_next_token_bitmask(words);
  matcher_.rollback(fed);
}

void GrammarConstraint::accept(TokenId t) {
  if (matcher_.is_terminated()) return;  // eos again after the end
  matcher_.accept_token(t);
}

std::shared_ptr<TokenConstraint> ConstraintCompiler::make(const ConstraintSpec& spec) {
  std::shared_ptr<TokenTable> table;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!table_) table_ = TokenTable::build(tokenizer_, n_vocab_);
    table = table_;
  }
  return std::make_shared<GrammarConstraint>(CompiledGrammar::compile(grammar_from_constraint(spec), table));
}

}  // namespace servelab::grammar
