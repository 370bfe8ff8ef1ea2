#pragma once
// Byte-level BPE as Hugging Face tokenizers runs it (internal to the model library; the public
// face is Tokenizer in tokenizer.h). Loaded by tokenizer_load.cpp.
#include <array>
#include <functional>
#include <string_view>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_pretok.h"

namespace servelab {

/// string -> value maps looked up by string_view without building a string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

/// The merge table: (left id, right id) -> (rank, merged id), open addressing on one array,
/// because BPE spends its time in these lookups.
class MergeTable {
 public:
  struct Entry {
    uint64_t key1 = 0;  ///< (left << 32 | right) + 1; 0 marks an empty slot
    int32_t rank = 0;
    TokenId merged = 0;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
  }
  /// Keeps the first rank a pair was given. Call reserve(n) first with n >= every insert.
  void insert(TokenId left, TokenId right, int32_t rank, TokenId merged) {
    const uint64_t k = key(left, right);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (slots_[i].key1 == k) return;
      if (slots_[i].key1 == 0) {
        slots_[i] = {k, rank, merged};
        ++size_;
        return;
      }
    }
  }
  const Entry* find(TokenId left, TokenId right) const {
    const uint64_t k = key(left, right);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (slots_[i].key1 == k) return &slots_[i];
      if (slots_[i].key1 == 0) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static uint64_t key(TokenId l, TokenId r) { return ((uint64_t(uint32_t(l)) << 32) | uint32_t(r)) + 1; }
  size_t slot(uint64_t k) const { return size_t((k * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<Entry> slots_{16};
  size_t mask_ = 15, size_ = 0;
};

/// A token of tokenizer.json's added_tokens: matched in the text before BPE runs.
struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool special = false;
  bool lstrip = false, rstrip = false;  ///< absorb the whitespace on that side
  bool single_word = false;             ///< match only where no letter/digit/_ touches it
};

/// Everything a byte-level BPE tokenizer is made of, as loaded from tokenizer.json.
struct BpeData {
  std::string source;                          ///< file it came from (names errors, name())
  std::vector<std::string> id_bytes;           ///< [vocab] raw bytes of each id ("" if none)
  StringMap<TokenId> vocab;                    ///< raw bytes -> id (model.vocab)
  std::array<TokenId, 256> byte_id{};          ///< the id of each single byte
  MergeTable merges;
  std::vector<AddedToken> added;
  std::vector<bool> is_special;                ///< [vocab]
  PreTokenizerSpec pretok;
  bool nfc = false;            ///< normalizer NFC
  bool ignore_merges = false;  ///< a word found whole in the vocab is one token (Llama-3)
  std::optional<TokenId> eos, bos;
  std::string chat_template;
};

/// The BPE tokenizer over BpeData. encode is thread-safe; its word cache is sharded by hash.
class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeData data);

  std::string name() const override { return "bpe:" + data_.source; }
  std::vector<TokenId> encode(std::string_view text, bool parse_special = true) const override;
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const override;
  int vocab_size() const override { return int(data_.id_bytes.size()); }
  std::optional<TokenId> token_id(std::string_view token) const override;
  std::optional<TokenId> eos_id() const override { return data_.eos; }
  std::optional<TokenId> bos_id() const override { return data_.bos; }
  const std::string& chat_template() const override { return data_.chat_template; }
  std::string token_bytes(TokenId id, bool skip_special = false) const override;

  /// Ids of one pre-tokenized word (raw bytes), appended to out. Exposed for tests.
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;

 private:
  void encode_text(std::string_view text, std::vector<TokenId>& out) const;
  void merge_word(std::string_view word, std::vector<TokenId>& out) const;
  // The longest added token matching text at pos (nullptr if none).
  const AddedToken* match_added(std::string_view text, size_t pos, bool parse_special) const;

  BpeData data_;
  std::array<std::vector<uint32_t>, 256> added_by_first_;  // indices into data_.added, longest first

  static constexpr int kShards = 16;
  static constexpr size_t kShardCapacity = 1 << 14;
  struct CacheShard {
    std::mutex mu;
    StringMap<std::vector<TokenId>> words;
  };
  std::unique_ptr<CacheShard[]> cache_;
};

/// Reads tokenizer.json into BpeData (what load_bpe_tokenizer wraps); throws std::runtime_error
/// naming the file and the unsupported or malformed part.
BpeData load_bpe_data(const std::string& tokenizer_json_path);

/// The id of a token named as in tokenizer.json: an added token's content, or a vocab entry in
/// byte-level form ("Ġhello").
std::optional<TokenId> find_token(const BpeData& data, std::string_view token);

/// The bytes_to_unicode map of GPT-2's byte-level BPE: byte b is written as this code point.
char32_t byte_to_unicode(unsigned char b);

}  // namespace servelab
