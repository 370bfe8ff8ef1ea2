// TokenTable: the vocabulary's bytes and trie.
#include "engine/grammar/token_table.h"

#include <algorithm>

#include "engine/grammar/grammar_error.h"

namespace servelab::grammar {

std::shared_ptr<TokenTable> TokenTable::build(const Tokenizer& tok, int n_vocab) {
  auto t = std::make_shared<TokenTable>();
  const int n_tok = tok.vocab_size();
  t->n_vocab_ = n_vocab > 0 ? n_vocab : n_tok;
  if (t->n_vocab_ < n_tok) throw GrammarError("token mask of " + std::to_string(n_vocab) + " ids is smaller than the tokenizer's vocabulary (" + std::to_string(n_tok) + ")");
  t->eos_ = tok.eos_id();
  t->offsets_.push_back(0);
  for (int id = 0; id < t->n_vocab_; ++id) {
    if (id < n_tok && !(t->eos_ && *t->eos_ == id)) t->blob_ += tok.token_bytes(id, /*skip_special=*/true);
    t->offsets_.push_back(static_cast<uint32_t>(t->blob_.size()));
  }
  for (int id = 0; id < t->n_vocab_; ++id)
    if (!t->bytes(id).empty()) t->sorted_.push_back(id);
  std::sort(t->sorted_.begin(), t->sorted_.end(), [&](int32_t a, int32_t b) {
    const auto x = t->bytes(a), y = t->bytes(b);
    return x != y ? x < y : a < b;
  });
  std::vector<uint32_t> open;  // nodes on the current path, by depth - 1
  std::string_view prev;
  for (size_t k = 0; k < t->sorted_.size(); ++k) {
    const std::string_view cur = t->bytes(t->sorted_[k]);
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < cur.size() && prev[lcp] == cur[lcp]) ++lcp;
    while (open.size() > lcp) {
      t->node_end_[open.back()] = static_cast<uint32_t>(t->node_byte_.size());
      open.pop_back();
    }
    for (size_t d = lcp; d < cur.size(); ++d) {
      open.push_back(static_cast<uint32_t>(t->node_byte_.size()));
      t->node_byte_.push_back(static_cast<unsigned char>(cur[d]));
      t->node_depth_.push_back(static_cast<uint32_t>(d + 1));
      t->node_end_.push_back(0);
      t->node_tok_.push_back(static_cast<uint32_t>(k));
    }
    t->max_depth_ = std::max<uint32_t>(t->max_depth_, static_cast<uint32_t>(cur.size()));
    prev = cur;
  }
  while (!open.empty()) {
    t->node_end_[open.back()] = static_cast<uint32_t>(t->node_byte_.size());
    open.pop_back();
  }
  t->node_tok_.push_back(static_cast<uint32_t>(t->sorted_.size()));
  return t;
}

std::shared_ptr<const TokenClasses> TokenTable::find_shared(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = shared_.find(key);
  return it == shared_.end() ? nullptr : it->second;
}

void TokenTable::put_shared(const std::string& key, std::shared_ptr<const TokenClasses> classes) {
  std::lock_guard<std::mutex> lock(mu_);
  shared_.emplace(key, std::move(classes));
}

size_t TokenTable::n_shared() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shared_.size();
}

}  // namespace servelab::grammar
