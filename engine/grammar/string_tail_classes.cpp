// One pass over the vocabulary per bounded-string sub-state, shared by every tail.
#include "engine/grammar/string_tail_classes.h"

#include <algorithm>
#include <stdexcept>

namespace servelab::grammar {
namespace string_tail_detail {  // named: a unity batch shares one translation unit

// What a tail does with the bytes `pending` + `token`, read from the tail's start.
struct TailFate {
  bool dead = false;     ///< a byte no tail allows there (control, broken UTF-8, bad escape)
  int chars = 0;         ///< characters completed before the closing quote or the end
  bool partial = false;  ///< the bytes end inside a character
  long quote = -1;       ///< index of the closing quote in the whole string, -1 when none
};

TailFate tail_fate(std::string_view pending, std::string_view token) {
  const size_t np = pending.size(), n = np + token.size();
  auto at = [&](size_t i) { return static_cast<unsigned char>(i < np ? pending[i] : token[i - np]); };
  TailFate f;
  size_t i = 0;
  while (i < n) {
    const unsigned char c = at(i);
    if (c == '"') {  // the closing quote (at a character boundary)
      f.quote = static_cast<long>(i);
      return f;
    }
    size_t extra = 0;  // bytes of this character after its first
    unsigned char lo = 0x80, hi = 0xBF;  // the range of its second byte
    if (c == '\\') {
      extra = 1;
      if (i + 1 < n && std::string_view("\"\\/bfnrt").find(static_cast<char>(at(i + 1))) == std::string_view::npos) f.dead = true;
    } else if (c < 0x20) {
      f.dead = true;
    } else if (c >= 0x80) {
      if (c >= 0xC2 && c <= 0xDF) extra = 1;
      else if (c >= 0xE0 && c <= 0xEF) extra = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
      else if (c >= 0xF0 && c <= 0xF4) extra = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
      else f.dead = true;
      for (size_t k = 1; k <= extra && !f.dead && i + k < n; ++k) {
        const unsigned char x = at(i + k);
        if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) f.dead = true;
      }
    }
    if (f.dead) return f;
    if (i + extra >= n) {  // the bytes end inside this character
      f.partial = true;
      return f;
    }
    i += extra + 1;
    ++f.chars;
  }
  return f;
}

}  // namespace string_tail_detail

StringTailScan::StringTailScan(const TokenTable& tt, std::string_view pending) : tt_(tt) {
  using string_tail_detail::tail_fate;
  if (!pending.empty()) {
    const auto f = tail_fate({}, pending);
    if (f.dead || !f.partial || f.chars != 0)
      throw std::invalid_argument("string tail: the pending bytes are not the start of one character");
  }
  // Only the trie's top-level subtrees whose first byte can follow `pending`: a token whose first
  // byte is dead there is dead whatever follows.
  const size_t n_nodes = tt.n_nodes();
  const std::span<const int32_t> sorted = tt.sorted_tokens();
  for (size_t node = 0; node < n_nodes; node = tt.node_end(node)) {
    const char first = static_cast<char>(tt.node_byte(node));
    if (tail_fate(pending, std::string_view(&first, 1)).dead) continue;
    for (uint32_t k = tt.node_tok(node); k < tt.node_tok(tt.node_end(node)); ++k) {
      const int32_t id = sorted[k];
      const std::string_view b = tt.bytes(id);
      const auto f = tail_fate(pending, b);
      ++n_scanned_;
      if (f.dead) continue;
      if (f.quote < 0) {
        const size_t used = static_cast<size_t>(f.chars + (f.partial ? 1 : 0));
        if (open_by_chars_.size() <= used) open_by_chars_.resize(used + 1);
        open_by_chars_[used].push_back(id);
        continue;
      }
      const size_t q = static_cast<size_t>(f.quote) - pending.size();  // the quote's index in the token
      quoted_.push_back({f.chars, id, q + 1 == b.size() ? -1 : static_cast<unsigned char>(b[q + 1])});
    }
  }
}

TokenClasses StringTailScan::classes(int left, int need) {
  TokenClasses out;
  const size_t last = std::min(static_cast<size_t>(left) + 1, open_by_chars_.size());  // buckets [0, last)
  size_t n_open = 0;
  for (size_t c = 0; c < last; ++c) n_open += open_by_chars_[c].size();
  std::vector<int32_t> quoted_accepted;
  for (const Quoted& q : quoted_) {
    if (q.chars > left || q.chars < need) continue;  // the quote comes too late or too early
    if (q.next < 0) quoted_accepted.push_back(q.id);  // the frame completes exactly at the token's end
    else out.uncertain.push_back({q.id, static_cast<unsigned char>(q.next)});
  }
  out.n_accepted = n_open + quoted_accepted.size();
  // The same representation as compute_token_classes: bits when they outnumber the mask's words.
  if (out.n_accepted <= static_cast<size_t>(tt_.n_words())) {
    for (size_t c = 0; c < last; ++c) out.accepted.insert(out.accepted.end(), open_by_chars_[c].begin(), open_by_chars_[c].end());
    out.accepted.insert(out.accepted.end(), quoted_accepted.begin(), quoted_accepted.end());
    std::sort(out.accepted.begin(), out.accepted.end());
    return out;
  }
  if (running_left_ < 0 || left < running_left_) {  // start over
    running_bits_.assign(static_cast<size_t>(tt_.n_words()), 0);
    running_left_ = -1;
  }
  for (size_t c = static_cast<size_t>(running_left_ + 1); c < last; ++c)
    for (int32_t id : open_by_chars_[c]) running_bits_[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  running_left_ = left;
  out.accepted_bits = running_bits_;
  for (int32_t id : quoted_accepted) out.accepted_bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  return out;
}

std::string bytes_from_rule_start(const Automaton& a, int32_t state) {
  const int rule = a.rule_of(state);
  const int32_t first = a.rule_first_state(rule), n = a.rule_n_states(rule);
  // Breadth first, bytes in increasing order: the first path found to a state is the shortest
  // and, among those, the smallest.
  std::vector<int32_t> from(static_cast<size_t>(n), -1);
  std::vector<unsigned char> via(static_cast<size_t>(n), 0);
  std::vector<char> seen(static_cast<size_t>(n), 0);
  std::vector<int32_t> queue = {a.rule_start(rule)};
  seen[static_cast<size_t>(a.rule_start(rule) - first)] = 1;
  for (size_t k = 0; k < queue.size() && !seen[static_cast<size_t>(state - first)]; ++k) {
    const int32_t s = queue[k];
    for (int b = 0; b < 256; ++b) {
      const int32_t t = a.next(s, static_cast<unsigned char>(b));
      if (t < 0 || seen[static_cast<size_t>(t - first)]) continue;
      seen[static_cast<size_t>(t - first)] = 1;
      from[static_cast<size_t>(t - first)] = s;
      via[static_cast<size_t>(t - first)] = static_cast<unsigned char>(b);
      queue.push_back(t);
    }
  }
  if (!seen[static_cast<size_t>(state - first)])
    throw std::invalid_argument("state " + std::to_string(state) + " is not reached from its rule's start by bytes");
  std::string out;
  for (int32_t s = state; s != a.rule_start(rule); s = from[static_cast<size_t>(s - first)])
    out.push_back(static_cast<char>(via[static_cast<size_t>(s - first)]));
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace servelab::grammar
