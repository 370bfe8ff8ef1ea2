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
  store_accepted(out, tt);
  return out;
}

void store_accepted(TokenClasses& out, const TokenTable& tt) {
  out.n_accepted = out.accepted.size();
  if (out.accepted.size() > static_cast<size_t>(tt.n_words())) {
    out.accepted_bits.assign(static_cast<size_t>(tt.n_words()), 0);
    for (int32_t id : out.accepted) out.accepted_bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    out.accepted.clear();
    out.accepted.shrink_to_fit();
  }
}

}  // namespace servelab::grammar
