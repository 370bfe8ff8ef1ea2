#include "engine/grammar/grammar_constraint.h"

#include <algorithm>
#include <string>
#include <vector>

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

std::vector<TokenId> GrammarConstraint::forced_tokens(int max_tokens) {
  std::vector<TokenId> out;
  if (max_tokens < 1 || matcher_.is_terminated()) return out;
  const std::string forced = matcher_.find_jump_forward_string();
  const TokenTable& table = matcher_.grammar().tokens();
  const std::span<const int32_t> sorted = table.sorted_tokens();
  size_t at = 0;
  std::vector<int32_t> candidates;  // tokens spelling forced[at, at + depth), shortest first
  while (at < forced.size() && static_cast<int>(out.size()) < max_tokens) {
    // Down the trie along what is left: node i's children are the depth + 1 nodes of its
    // subtree [i + 1, node_end(i)), each followed by its own subtree.
    candidates.clear();
    size_t node = 0, end = table.n_nodes();
    for (size_t depth = 0; at + depth < forced.size(); ++depth) {
      const auto byte = static_cast<unsigned char>(forced[at + depth]);
      while (node < end && table.node_byte(node) != byte) node = table.node_end(node);
      if (node >= end) break;
      for (uint32_t k = table.node_tok(node); k < table.node_tok(node + 1); ++k) candidates.push_back(sorted[k]);
      end = table.node_end(node);
      ++node;
    }
    bool took = false;
    for (size_t k = candidates.size(); k-- > 0 && !took;) {  // longest first
      if (!matcher_.accept_token(candidates[k])) continue;
      out.push_back(candidates[k]);
      at += table.bytes(candidates[k]).size();
      took = true;
    }
    if (!took) break;
  }
  matcher_.rollback(static_cast<int>(out.size()));
  return out;
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
