#include "engine/model/tokenizer_bpe.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <queue>
#include <tuple>

#include "engine/model/tokenizer_unicode.h"

namespace servelab {
namespace {

using unicode::CharClass;

constexpr size_t kScanMergeMax = 48;  // words up to this many bytes merge by rescanning; longer use a heap
constexpr size_t kCacheMaxWordBytes = 64;

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

bool is_word_char(char32_t cp) {
  const CharClass c = unicode::char_class(cp);
  return c == CharClass::letter || c == CharClass::number || cp == U'_';
}

}  // namespace

char32_t byte_to_unicode(unsigned char b) {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174);
      t[c] = printable ? char32_t(c) : next++;
    }
    return t;
  }();
  return table[b];
}

BpeTokenizer::BpeTokenizer(BpeData data) : data_(std::move(data)), cache_(new CacheShard[kShards]) {
  data_.is_special.resize(data_.id_bytes.size(), false);
  for (uint32_t i = 0; i < data_.added.size(); ++i)
    if (!data_.added[i].content.empty())
      added_by_first_[static_cast<unsigned char>(data_.added[i].content[0])].push_back(i);
  for (auto& list : added_by_first_)
    std::stable_sort(list.begin(), list.end(),
                     [&](uint32_t a, uint32_t b) { return data_.added[a].content.size() > data_.added[b].content.size(); });
}

// Lowest-rank pair first, leftmost among equals: the order Hugging Face's BPE merges in.
void BpeTokenizer::merge_word(std::string_view word, std::vector<TokenId>& out) const {
  thread_local std::vector<TokenId> sym;
  sym.clear();
  for (const char c : word) sym.push_back(data_.byte_id[static_cast<unsigned char>(c)]);
  const auto& merges = data_.merges;
  if (sym.size() <= kScanMergeMax) {
    while (sym.size() > 1) {
      int32_t best_rank = INT32_MAX;
      size_t best = 0;
      TokenId merged = 0;
      for (size_t k = 0; k + 1 < sym.size(); ++k) {
        const MergeTable::Entry* e = merges.find(sym[k], sym[k + 1]);
        if (e && e->rank < best_rank) best_rank = e->rank, best = k, merged = e->merged;
      }
      if (best_rank == INT32_MAX) break;
      sym[best] = merged;
      sym.erase(sym.begin() + best + 1);
    }
    out.insert(out.end(), sym.begin(), sym.end());
    return;
  }
  // Long words (whitespace runs, minified code): a linked list of symbols and a heap of
  // candidate merges, stale entries skipped when popped.
  const int n = int(sym.size());
  std::vector<int> next(n), prev(n);
  for (int k = 0; k < n; ++k) next[k] = k + 1, prev[k] = k - 1;
  using Cand = std::tuple<int32_t, int, TokenId, TokenId>;  // rank, left position, left id, right id
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  const auto push = [&](int l) {
    if (l < 0 || next[l] >= n) return;
    if (const MergeTable::Entry* e = merges.find(sym[l], sym[next[l]])) heap.emplace(e->rank, l, sym[l], sym[next[l]]);
  };
  for (int k = 0; k + 1 < n; ++k) push(k);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const auto [rank, l, left, right] = heap.top();
    heap.pop();
    if (dead[l] || next[l] >= n || sym[l] != left || sym[next[l]] != right) continue;
    const int r = next[l];
    sym[l] = merges.find(left, right)->merged;
    dead[r] = true;
    next[l] = next[r];
    if (next[r] < n) prev[next[r]] = l;
    push(prev[l]);
    push(l);
  }
  for (int k = 0; k < n; k = next[k]) out.push_back(sym[k]);
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.size() == 1) {
    out.push_back(data_.byte_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (data_.ignore_merges) {
    const auto it = data_.vocab.find(word);
    if (it != data_.vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kCacheMaxWordBytes) {
    merge_word(word, out);
    return;
  }
  const size_t h = std::hash<std::string_view>{}(word);
  CacheShard& shard = cache_[h % kShards];
  {
    std::lock_guard lock(shard.mu);
    const auto it = shard.words.find(word);
    if (it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  std::lock_guard lock(shard.mu);
  if (shard.words.size() >= kShardCapacity) shard.words.clear();  // bounded memory; hot words return fast
  shard.words.emplace(std::string(word), std::vector<TokenId>(out.begin() + first, out.end()));
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  std::string normalized;
  if (data_.nfc && !unicode::nfc_quick_check(text)) {
    normalized = unicode::nfc(text);
    text = normalized;
  }
  if (data_.pretok.add_prefix_space && text[0] != ' ') {
    std::string prefixed(1, ' ');
    prefixed += text;  // text may view normalized: build aside, then move
    normalized = std::move(prefixed);
    text = normalized;
  }
  thread_local std::vector<std::pair<size_t, size_t>> words;
  words.clear();
  split_words(text, data_.pretok, words);
  for (const auto& [b, e] : words) encode_word(text.substr(b, e - b), out);
}

const AddedToken* BpeTokenizer::match_added(std::string_view text, size_t pos, bool parse_special) const {
  for (const uint32_t i : added_by_first_[static_cast<unsigned char>(text[pos])]) {
    const AddedToken& t = data_.added[i];
    if (t.special && !parse_special) continue;
    if (text.compare(pos, t.content.size(), t.content) != 0) continue;
    if (t.single_word) {
      int len;
      if (pos > 0) {
        size_t before = pos - 1;  // the start of the character before the match
        while (before > 0 && (static_cast<unsigned char>(text[before]) & 0xC0) == 0x80) --before;
        if (is_word_char(unicode::decode_at(text, before, &len))) continue;
      }
      const size_t after = pos + t.content.size();
      if (after < text.size() && is_word_char(unicode::decode_at(text, after, &len))) continue;
    }
    return &t;
  }
  return nullptr;
}

std::vector<TokenId> BpeTokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  size_t seg = 0;  // start of the text not yet encoded
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* t =
        added_by_first_[static_cast<unsigned char>(text[pos])].empty() ? nullptr : match_added(text, pos, parse_special);
    if (!t) {
      ++pos;
      continue;
    }
    size_t seg_end = pos;
    if (t->lstrip)
      while (seg_end > seg && is_ascii_space(text[seg_end - 1])) --seg_end;
    encode_text(text.substr(seg, seg_end - seg), out);
    out.push_back(t->id);
    pos += t->content.size();
    if (t->rstrip)
      while (pos < text.size() && is_ascii_space(text[pos])) ++pos;
    seg = pos;
  }
  encode_text(text.substr(seg), out);
  return out;
}

std::string BpeTokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string bytes;
  for (const TokenId id : ids) {
    if (id < 0 || size_t(id) >= data_.id_bytes.size()) continue;  // no such token: nothing, as HF
    if (skip_special && data_.is_special[id]) continue;
    bytes += data_.id_bytes[id];
  }
  return unicode::to_valid_utf8(bytes);
}

std::string BpeTokenizer::token_bytes(TokenId id, bool skip_special) const {
  if (id < 0 || size_t(id) >= data_.id_bytes.size() || (skip_special && data_.is_special[id])) return "";
  return data_.id_bytes[id];
}

std::optional<TokenId> find_token(const BpeData& data, std::string_view token) {
  for (const AddedToken& t : data.added)
    if (t.content == token) return t.id;
  // Vocab entries are named in byte-level form ("Ġhello"); look them up by their bytes.
  static const std::array<int, 512> inverse = [] {
    std::array<int, 512> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_unicode(static_cast<unsigned char>(b))] = b;
    return t;
  }();
  std::string raw;
  for (size_t i = 0; i < token.size();) {
    int len;
    const char32_t cp = unicode::decode_at(token, i, &len);
    if (cp >= inverse.size() || inverse[cp] < 0) {
      raw = token;
      break;
    }
    raw += char(inverse[cp]);
    i += len;
  }
  const auto it = data.vocab.find(raw);
  if (it != data.vocab.end()) return it->second;
  return std::nullopt;
}

std::optional<TokenId> BpeTokenizer::token_id(std::string_view token) const { return find_token(data_, token); }

}  // namespace servelab
