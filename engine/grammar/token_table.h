#pragma once
// What the grammar engine precomputes once per tokenizer and shares across all grammars and
// requests: every token's bytes, a byte trie of the vocabulary in preorder (so a walk can skip a
// whole subtree of tokens that share a dead prefix), and the cache of token classes of shareable
// rule states (token_classes.h). Thread-safe after build().
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/model/tokenizer.h"

namespace servelab::grammar {

struct TokenClasses;

class TokenTable {
 public:
  /// n_vocab: ids (bits) in the mask, the model's logits row; 0 = tokenizer.vocab_size(). Ids
  /// without bytes (special tokens other than eos, ids past the tokenizer's) are never allowed.
  static std::shared_ptr<TokenTable> build(const Tokenizer& tokenizer, int n_vocab = 0);

  int n_vocab() const { return n_vocab_; }
  int n_words() const { return (n_vocab_ + 31) / 32; }  ///< uint32 words of a mask
  std::optional<int32_t> eos() const { return eos_; }
  std::string_view bytes(int32_t id) const {
    return {blob_.data() + offsets_[static_cast<size_t>(id)], offsets_[static_cast<size_t>(id) + 1] - offsets_[static_cast<size_t>(id)]};
  }

  /// The trie in preorder: node i at depth node_depth(i) >= 1 (bytes from the root), its
  /// subtree is [i, node_end(i)); the tokens spelled exactly by the path to i are
  /// sorted_tokens()[node_tok(i), node_tok(i + 1)), those of its subtree up to node_tok(node_end(i)).
  size_t n_nodes() const { return node_byte_.size(); }
  unsigned char node_byte(size_t i) const { return node_byte_[i]; }
  uint32_t node_depth(size_t i) const { return node_depth_[i]; }
  uint32_t node_end(size_t i) const { return node_end_[i]; }
  uint32_t node_tok(size_t i) const { return node_tok_[i]; }  ///< valid for i in [0, n_nodes()]
  std::span<const int32_t> sorted_tokens() const { return sorted_; }
  uint32_t max_depth() const { return max_depth_; }

  /// The shared classes of a rule state named by its share key, or nullptr.
  std::shared_ptr<const TokenClasses> find_shared(const std::string& key) const;
  void put_shared(const std::string& key, std::shared_ptr<const TokenClasses> classes);
  size_t n_shared() const;

 private:
  int n_vocab_ = 0;
  std::optional<int32_t> eos_;
  std::string blob_;
  std::vector<uint32_t> offsets_;
  std::vector<unsigned char> node_byte_;
  std::vector<uint32_t> node_depth_, node_end_, node_tok_;
  std::vector<int32_t> sorted_;
  uint32_t max_depth_ = 0;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const TokenClasses>> shared_;
};

}  // namespace servelab::grammar
