// The report's GBNF checker: reads llama.cpp's grammar syntax into a small tree and decides
// whether a text derives from `root`, by the sets of end positions each rule can reach from each
// start (memoized per rule and position, so nested repetition stays polynomial). Written apart
// from the grammar engine (engine/grammar/gbnf.cpp), which compiles the same syntax to automata:
// the two agreeing is the check.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <stdexcept>

#include "analysis/big_stack.h"
#include "analysis/constraint_check.h"

namespace servelab::analysis {
namespace gbnf_check_detail {  // named: a unity batch shares one translation unit

struct Node {
  enum Type { literal, char_class, any, ref, seq, alt, repeat } type;
  std::u32string text;                                  // literal
  std::vector<std::pair<char32_t, char32_t>> ranges;    // char_class
  bool negated = false;
  int rule = -1;                                        // ref
  std::vector<int> kids;                                // seq, alt, repeat (one)
  int min = 0, max = -1;                                // repeat; max -1 = unbounded
};

class Reader {
 public:
  explicit Reader(const std::string& src) : s_(src) {}

  void read() {
    skip();
    while (i_ < s_.size()) {
      const std::string name = ident();
      if (name.empty()) fail("expected a rule name");
      skip();
      if (s_.compare(i_, 3, "::=") != 0) fail("expected ::= after " + name);
      i_ += 3;
      const int r = rule_id(name);
      if (body_[static_cast<size_t>(r)] >= 0) fail("rule " + name + " is defined twice");
      body_[static_cast<size_t>(r)] = alternatives();
      skip();
    }
    for (size_t r = 0; r < names_.size(); ++r)
      if (body_[r] < 0) throw std::invalid_argument("rule " + names_[r] + " is used but not defined");
    if (!ids_.count("root")) throw std::invalid_argument("no root rule");
  }

  std::vector<Node> nodes;
  std::vector<int> body_;
  std::vector<std::string> names_;
  std::map<std::string, int> ids_;

 private:
  [[noreturn]] void fail(const std::string& what) const {
    const int line = 1 + static_cast<int>(std::count(s_.begin(), s_.begin() + static_cast<long>(std::min(i_, s_.size())), '\n'));
    throw std::invalid_argument(what + " at line " + std::to_string(line));
  }
  void skip() {
    while (i_ < s_.size()) {
      if (s_[i_] == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }
  static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }
  std::string ident() {
    const size_t b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    return s_.substr(b, i_ - b);
  }
  int rule_id(const std::string& name) {
    auto [it, fresh] = ids_.try_emplace(name, static_cast<int>(names_.size()));
    if (fresh) {
      names_.push_back(name);
      body_.push_back(-1);
    }
    return it->second;
  }
  int add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }
  // Is a new rule's "name ::=" next?
  bool rule_head_next() const {
    size_t j = i_;
    while (j < s_.size() && name_char(s_[j])) ++j;
    if (j == i_) return false;
    while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t' || s_[j] == '\n' || s_[j] == '\r')) ++j;
    return s_.compare(j, 3, "::=") == 0;
  }
  int alternatives() {
    Node a{Node::alt};
    a.kids.push_back(sequence());
    while (i_ < s_.size() && s_[i_] == '|') {
      ++i_;
      a.kids.push_back(sequence());
    }
    return a.kids.size() == 1 ? a.kids[0] : add(std::move(a));
  }
  int sequence() {
    Node q{Node::seq};
    for (;;) {
      skip();
      if (i_ >= s_.size() || s_[i_] == '|' || s_[i_] == ')' || rule_head_next()) break;
      int item = primary();
      for (;;) {  // quantifiers
        skip();
        if (i_ >= s_.size()) break;
        const char c = s_[i_];
        Node r{Node::repeat};
        r.kids = {item};
        if (c == '*' || c == '+' || c == '?') {
          ++i_;
          r.min = c == '+' ? 1 : 0;
          r.max = c == '?' ? 1 : -1;
        } else if (c == '{') {
          ++i_;
          r.min = number();
          r.max = r.min;
          if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            skip();
            r.max = i_ < s_.size() && s_[i_] == '}' ? -1 : number();
          }
          skip();
          if (i_ >= s_.size() || s_[i_] != '}') fail("expected } in a repetition");
          ++i_;
        } else {
          break;
        }
        item = add(std::move(r));
      }
      q.kids.push_back(item);
    }
    return q.kids.size() == 1 ? q.kids[0] : add(std::move(q));
  }
  int number() {
    skip();
    const size_t b = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (b == i_) fail("expected a number in a repetition");
    if (i_ - b > 6 || std::stoi(s_.substr(b, i_ - b)) > 100000) fail("repetition count over 100000");
    return std::stoi(s_.substr(b, i_ - b));
  }
  char32_t utf8_char() {
    const unsigned char c = static_cast<unsigned char>(s_[i_]);
    const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len && i_ + static_cast<size_t>(k) < s_.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s_[i_ + static_cast<size_t>(k)]) & 0x3F);
    i_ += static_cast<size_t>(len);
    return cp;
  }
  char32_t hex(int n) {
    if (i_ + static_cast<size_t>(n) > s_.size()) fail("short hex escape");
    const char32_t v = static_cast<char32_t>(std::stoul(s_.substr(i_, static_cast<size_t>(n)), nullptr, 16));
    i_ += static_cast<size_t>(n);
    return v;
  }
  char32_t one_char() {  // in a literal or a class: an escape or a UTF-8 character
    if (i_ >= s_.size()) fail("unterminated literal or class");
    if (s_[i_] != '\\') return utf8_char();
    ++i_;
    if (i_ >= s_.size()) fail("escape at the end");
    const char e = s_[i_++];
    switch (e) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      default: return static_cast<unsigned char>(e);  // \\ \" \[ \] \- ...
    }
  }
  int primary() {
    const char c = s_[i_];
    if (c == '"') {
      ++i_;
      Node l{Node::literal};
      while (i_ < s_.size() && s_[i_] != '"') l.text += one_char();
      if (i_ >= s_.size()) fail("unterminated string literal");
      ++i_;
      return add(std::move(l));
    }
    if (c == '[') {
      ++i_;
      Node k{Node::char_class};
      if (i_ < s_.size() && s_[i_] == '^') k.negated = true, ++i_;
      while (i_ < s_.size() && s_[i_] != ']') {
        const char32_t lo = one_char();
        char32_t hi = lo;
        if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
          ++i_;
          hi = one_char();
        }
        k.ranges.push_back({lo, hi});
      }
      if (i_ >= s_.size()) fail("unterminated character class");
      ++i_;
      return add(std::move(k));
    }
    if (c == '.') {
      ++i_;
      return add(Node{Node::any});
    }
    if (c == '(') {
      ++i_;
      if (++depth_ > kMaxNesting) fail("groups nested deeper than " + std::to_string(kMaxNesting));
      const int inner = alternatives();
      --depth_;
      skip();
      if (i_ >= s_.size() || s_[i_] != ')') fail("expected )");
      ++i_;
      return inner;
    }
    const std::string name = ident();
    if (name.empty()) fail(std::string("unexpected '") + c + "'");
    Node r{Node::ref};
    r.rule = rule_id(name);
    return add(std::move(r));
  }

  static constexpr int kMaxNesting = 256;
  const std::string& s_;
  size_t i_ = 0;
  int depth_ = 0;
};

class Recognizer {
 public:
  Recognizer(const Reader& g, const std::u32string& text) : g_(g), t_(text) {}

  /// Thrown when a derivation nests deeper than kMaxDepth calls (the big stack's bound).
  struct TooDeep {};
  static constexpr int kMaxDepth = 20000;  // ~50 MB of stack under ASan at -O0 (2.4 KB a level), well inside the big stack

  std::set<size_t> ends(int node, size_t pos) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    const bool composite = n.type == Node::seq || n.type == Node::alt || n.type == Node::repeat;
    if (composite)  // each (node, position) is worked out once: nested repetition stays polynomial
      if (auto it = done_.find({node, pos}); it != done_.end()) return it->second;
    if (++depth_ > kMaxDepth) throw TooDeep{};
    std::set<size_t> out = ends_uncached(n, pos);
    --depth_;
    if (composite) done_[{node, pos}] = out;
    return out;
  }

 private:
  std::set<size_t> ends_uncached(const Node& n, size_t pos) {
    std::set<size_t> out;
    switch (n.type) {
      case Node::literal:
        if (t_.compare(pos, n.text.size(), n.text) == 0 && pos + n.text.size() <= t_.size()) out.insert(pos + n.text.size());
        break;
      case Node::char_class: {
        if (pos >= t_.size()) break;
        bool in = false;
        for (auto [lo, hi] : n.ranges) in = in || (t_[pos] >= lo && t_[pos] <= hi);
        if (in != n.negated) out.insert(pos + 1);
        break;
      }
      case Node::any:
        if (pos < t_.size()) out.insert(pos + 1);
        break;
      case Node::ref: {
        const auto key = std::make_pair(n.rule, pos);
        if (auto it = memo_.find(key); it != memo_.end()) return it->second;
        memo_[key] = {};  // a rule reaching itself without consuming (left recursion) matches nothing more
        out = ends(g_.body_[static_cast<size_t>(n.rule)], pos);
        memo_[key] = out;
        break;
      }
      case Node::seq: {
        std::set<size_t> cur = {pos};
        for (int k : n.kids) {
          std::set<size_t> next;
          for (size_t p : cur) next.merge(ends(k, p));
          cur.swap(next);
          if (cur.empty()) break;
        }
        out = std::move(cur);
        break;
      }
      case Node::alt:
        for (int k : n.kids) out.merge(ends(k, pos));
        break;
      case Node::repeat: {
        std::set<size_t> frontier = {pos}, seen;
        if (n.min == 0) out.insert(pos);
        for (int k = 1; n.max < 0 || k <= n.max; ++k) {
          std::set<size_t> next;
          for (size_t p : frontier) next.merge(ends(n.kids[0], p));
          if (n.max < 0 && k >= n.min) {  // unbounded: stop once no new position turns up
            std::set<size_t> fresh;
            for (size_t p : next)
              if (seen.insert(p).second) fresh.insert(p);
            next.swap(fresh);
          }
          if (k >= n.min) out.insert(next.begin(), next.end());
          if (next.empty()) break;
          if (next == frontier) {  // a fixed point (the item matched only empty): every later k gives the same
            if (k < n.min) out.insert(next.begin(), next.end());
            break;
          }
          frontier.swap(next);
        }
        break;
      }
    }
    return out;
  }

  const Reader& g_;
  const std::u32string& t_;
  std::map<std::pair<int, size_t>, std::set<size_t>> memo_;  // rules (refs), with the left-recursion stop
  std::map<std::pair<int, size_t>, std::set<size_t>> done_;  // seq, alt and repeat nodes
  int depth_ = 0;
};

std::u32string gbnf_utf8_to_u32(std::string_view s) {  // input: valid UTF-8 (checked by the caller)
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len && i + static_cast<size_t>(k) < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
    out += cp;
    i += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace gbnf_check_detail

std::string check_gbnf_output(std::string_view text, const std::string& gbnf) {
  using namespace gbnf_check_detail;
  if (!is_well_formed_utf8(text)) return "not valid UTF-8";
  Reader g(gbnf);
  try {
    g.read();
  } catch (const std::exception& e) {  // invalid_argument with the line; out_of_range from a number
    return std::string("grammar not readable: ") + e.what();
  }
  const std::u32string t = gbnf_utf8_to_u32(text);
  Recognizer rec(g, t);
  Node root{Node::ref};
  root.rule = g.ids_.at("root");
  Reader& gm = g;
  gm.nodes.push_back(root);
  std::set<size_t> ends;
  try {  // the recursion is as deep as the derivation: on a big stack, and bounded
    ends = call_on_big_stack([&] { return rec.ends(static_cast<int>(gm.nodes.size()) - 1, 0); });
  } catch (const Recognizer::TooDeep&) {
    return "output too deeply nested to check (a derivation over " + std::to_string(Recognizer::kMaxDepth) + " levels)";
  }
  if (ends.count(t.size())) return "";
  const size_t reached = ends.empty() ? 0 : *ends.rbegin();
  return "does not derive from the grammar (a derivation covers " + std::to_string(reached) + " of " +
         std::to_string(t.size()) + " characters)";
}

}  // namespace servelab::analysis
