// The per-state walk over the vocabulary trie.
#include "engine/grammar/token_classes.h"

#include "engine/grammar/stacks.h"

#include <algorithm>
#include <string_view>

namespace servelab::grammar {

TokenClasses compute_token_classes(const Automaton& a, const TokenTable& tt, int32_t state) {
  TokenClasses out;
  Stepper stepper(a, nullptr);
  std::vector<StackSet> level(tt.max_depth() + 1);
  level[0].add(kBaseLocal, std::span<const int32_t>(&state, 1));
  std::vector<uint32_t> pops;  // depths on the current path after which the frame completed
  const std::span<const int32_t> sorted = tt.sorted_tokens();
  auto add_uncertain = [&](uint32_t tok_begin, uint32_t tok_end) {
    for (uint32_t k = tok_begin; k < tok_end; ++k) {
      const int32_t id = sorted[k];
      const std::string_view bytes = tt.bytes(id);
      for (uint32_t d : pops) out.uncertain.push_back({id, static_cast<unsigned char>(bytes[d])});
    }
  };
  const size_t n = tt.n_nodes();
  for (size_t i = 0; i < n;) {
    const uint32_t d = tt.node_depth(i);
    while (!pops.empty() && pops.back() >= d) pops.pop_back();
    ++out.n_nodes_walked;
    StackSet& cur = level[d];
    stepper.step(level[d - 1], tt.node_byte(i), cur);
    if (!cur.empty() || cur.popped_local) {
      for (uint32_t k = tt.node_tok(i); k < tt.node_tok(i + 1); ++k) out.accepted.push_back(sorted[k]);
    } else if (!pops.empty()) {
      add_uncertain(tt.node_tok(i), tt.node_tok(i + 1));
    }
    if (cur.popped_local) pops.push_back(d);
    if (cur.empty()) {  // nothing below lives inside the frame
      if (!pops.empty()) add_uncertain(tt.node_tok(i + 1), tt.node_tok(tt.node_end(i)));
      i = tt.node_end(i);
      continue;
    }
    ++i;
  }
  out.n_accepted = out.accepted.size();
  if (out.accepted.size() > static_cast<size_t>(tt.n_words())) {
    out.accepted_bits.assign(static_cast<size_t>(tt.n_words()), 0);
    for (int32_t id : out.accepted) out.accepted_bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    out.accepted.clear();
    out.accepted.shrink_to_fit();
  }
  return out;
}

namespace {

// Accepted ids as a list, or as bits when they outnumber the mask's words (as the walk stores them).
void finish_accepted(TokenClasses& out, const TokenTable& tt) {
  out.n_accepted = out.accepted.size();
  if (out.accepted.size() > static_cast<size_t>(tt.n_words())) {
    out.accepted_bits.assign(static_cast<size_t>(tt.n_words()), 0);
    for (int32_t id : out.accepted) out.accepted_bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    out.accepted.clear();
    out.accepted.shrink_to_fit();
  }
}

}  // namespace

TokenClasses string_tail_start_classes(const TokenTable& tt, int left, int need) {
  TokenClasses out;
  for (const int32_t id : tt.sorted_tokens()) {
    const std::string_view b = tt.bytes(id);
    int chars = 0;          // characters completed
    bool partial = false;   // the token ends inside a character
    bool dead = false;
    size_t i = 0;
    while (i < b.size()) {
      const unsigned char c = static_cast<unsigned char>(b[i]);
      if (c == '"') break;  // the closing quote (at a character boundary)
      size_t n = 0;         // bytes of this character after its first
      unsigned char lo = 0x80, hi = 0xBF;
      if (c == '\\') {
        if (i + 1 < b.size() && std::string_view("\"\\/bfnrt").find(b[i + 1]) == std::string_view::npos) dead = true;
        n = 1;
      } else if (c < 0x20) {
        dead = true;
      } else if (c >= 0x80) {
        if (c >= 0xC2 && c <= 0xDF) n = 1;
        else if (c >= 0xE0 && c <= 0xEF) n = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) n = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else dead = true;
        for (size_t k = 1; k <= n && !dead && i + k < b.size(); ++k) {
          const unsigned char x = static_cast<unsigned char>(b[i + k]);
          if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) dead = true;
        }
      }
      if (dead) break;
      if (i + n >= b.size()) {  // the token ends inside this character
        partial = true;
        i = b.size();
        break;
      }
      i += n + 1;
      ++chars;
    }
    if (dead) continue;
    if (i == b.size()) {  // no closing quote: the string goes on
      if (chars + (partial ? 1 : 0) <= left) out.accepted.push_back(id);
      continue;
    }
    if (chars > left || chars < need) continue;  // the quote comes too early or too late
    if (i + 1 == b.size()) out.accepted.push_back(id);  // the frame completes exactly at the token's end
    else out.uncertain.push_back({id, static_cast<unsigned char>(b[i + 1])});
  }
  std::sort(out.accepted.begin(), out.accepted.end());
  finish_accepted(out, tt);
  return out;
}

}  // namespace servelab::grammar
