// GrammarMatcher: stacks as interned nodes, masks from the per-state classes plus the checked
// uncertain tokens of each stack (memoized per stack: a stack that comes back, as inside a long
// string, costs one copy).
#include "engine/grammar/matcher.h"

#include <algorithm>
#include <cstring>

namespace servelab::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), stepper_(grammar_->automaton(), &arena_) {
  const int32_t start = grammar_->automaton().root_start();
  stepper_.close_one(kBaseEnd, std::span<const int32_t>(&start, 1), x_);
  history_.push_back(intern(x_));
}

GrammarMatcher::State GrammarMatcher::intern(const StackSet& set) {
  State st;
  st.can_end = set.ended;
  for (const StackSet::Stack& s : set.stacks) {
    int32_t node = s.base;
    for (int32_t f : set.frames(s)) node = arena_.intern(f, node);
    st.nodes.push_back(node);
  }
  std::sort(st.nodes.begin(), st.nodes.end());
  st.nodes.erase(std::unique(st.nodes.begin(), st.nodes.end()), st.nodes.end());
  return st;
}

void GrammarMatcher::load(const State& st, StackSet& out) const {
  out.clear();
  for (int32_t node : st.nodes) {
    const int32_t s = arena_.state(node);
    out.add(arena_.parent(node), std::span<const int32_t>(&s, 1));
  }
}

bool GrammarMatcher::run(const State& from, std::string_view bytes, State* to) {
  if (from.terminated || bytes.empty()) return false;
  load(from, x_);
  for (char c : bytes) {
    if (!stepper_.step(x_, static_cast<unsigned char>(c), y_)) return false;
    std::swap(x_, y_);
  }
  if (to) *to = intern(x_);
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  State next;
  if (!run(history_.back(), bytes, &next)) return false;
  history_.push_back(std::move(next));
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  const TokenTable& tt = grammar_->tokens();
  if (id < 0 || id >= tt.n_vocab()) return false;
  if (tt.eos() && id == *tt.eos()) {
    if (!is_accepting()) return false;
    State done;
    done.terminated = true;
    history_.push_back(std::move(done));
    return true;
  }
  return accept_bytes(tt.bytes(id));
}

void GrammarMatcher::rollback(int n) {
  if (n < 0 || n > n_steps()) n = n_steps();
  history_.resize(history_.size() - static_cast<size_t>(n));
}

const std::vector<int32_t>& GrammarMatcher::allowed_uncertain(int32_t node) {
  auto it = node_allowed_.find(node);
  if (it != node_allowed_.end()) return it->second;
  if (node_allowed_.size() > 4096) node_allowed_.clear();  // bound the memo on long generations
  std::vector<int32_t> ok;
  const TokenTable& tt = grammar_->tokens();
  const int32_t s = arena_.state(node);
  for (int32_t id : grammar_->mask(s).uncertain) {
    x_.clear();
    x_.add(arena_.parent(node), std::span<const int32_t>(&s, 1));
    bool alive = true;
    for (char c : tt.bytes(id)) {
      if (!stepper_.step(x_, static_cast<unsigned char>(c), y_)) {
        alive = false;
        break;
      }
      std::swap(x_, y_);
    }
    if (alive) ok.push_back(id);
  }
  return node_allowed_.emplace(node, std::move(ok)).first->second;
}

void GrammarMatcher::fill_next_token_bitmask(uint32_t* words) {
  const size_t n_words = static_cast<size_t>(grammar_->tokens().n_words());
  std::memset(words, 0, n_words * sizeof(uint32_t));
  const State& st = history_.back();
  if (st.terminated) return;
  tops_.clear();
  for (int32_t node : st.nodes) {
    const int32_t s = arena_.state(node);
    if (std::find(tops_.begin(), tops_.end(), s) != tops_.end()) continue;
    tops_.push_back(s);
    const TokenClasses& c = *grammar_->mask(s).classes;
    if (!c.accepted_bits.empty()) {
      const uint32_t* src = c.accepted_bits.data();
      for (size_t w = 0; w < n_words; ++w) words[w] |= src[w];
    } else {
      for (int32_t id : c.accepted) words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    }
  }
  for (int32_t node : st.nodes)
    for (int32_t id : allowed_uncertain(node)) words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  const auto eos = grammar_->tokens().eos();
  if (st.can_end && eos) words[static_cast<size_t>(*eos) >> 5] |= 1u << (*eos & 31);
}

std::string GrammarMatcher::find_jump_forward_string(size_t max_bytes) {
  std::string out;
  State cur = history_.back();
  const Automaton& a = grammar_->automaton();
  while (out.size() < max_bytes && !cur.terminated && !cur.can_end && !cur.nodes.empty()) {
    int only = -1;
    bool unique = true;
    for (int32_t node : cur.nodes) {
      const int32_t s = arena_.state(node);
      for (int b = 0; b < 256 && unique; ++b) {
        if (a.next(s, static_cast<unsigned char>(b)) < 0) continue;
        if (only >= 0 && only != b) unique = false;
        only = b;
      }
    }
    if (!unique || only < 0) break;
    const char c = static_cast<char>(only);
    State next;
    if (!run(cur, std::string_view(&c, 1), &next)) break;
    out += c;
    cur = std::move(next);
  }
  return out;
}

}  // namespace servelab::grammar
