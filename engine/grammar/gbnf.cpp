// The GBNF front end: a recursive-descent parser straight to grammar expressions.
#include "engine/grammar/gbnf.h"

#include <map>

#include "engine/grammar/codepoints.h"
#include "engine/grammar/grammar_error.h"

namespace servelab::grammar {
namespace {

bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }

class GbnfParser {
 public:
  GbnfParser(Grammar& g, std::string_view text) : g_(g), t_(text) {}

  void parse() {
    skip();
    while (more()) {
      const size_t at = i_;
      const std::string name = read_name();
      skip();
      if (t_.substr(i_, 3) != "::=") fail("expected '::=' after rule name \"" + name + "\"");
      i_ += 3;
      const int rule = rule_id(name, at);
      if (defined_.count(name)) fail("rule \"" + name + "\" is defined twice", at);
      defined_[name] = at;
      g_.define_rule(rule, parse_alt());
      skip();
    }
    for (auto& [name, info] : used_)
      if (!defined_.count(name)) fail("rule \"" + name + "\" is used but not defined", info.second);
    auto root = used_.find("root");
    if (root == used_.end() || !defined_.count("root")) throw GrammarError("gbnf: no \"root\" rule");
    g_.set_root(root->second.first);
  }

 private:
  [[noreturn]] void fail(const std::string& what, size_t at = std::string_view::npos) const {
    if (at == std::string_view::npos) at = i_;
    int line = 1, col = 1;
    for (size_t k = 0; k < at && k < t_.size(); ++k) {
      if (t_[k] == '\n') ++line, col = 1;
      else ++col;
    }
    throw GrammarError("gbnf: " + what + " at line " + std::to_string(line) + " column " + std::to_string(col));
  }
  bool more() const { return i_ < t_.size(); }
  char peek() const { return t_[i_]; }

  void skip() {
    while (more()) {
      if (peek() == '#') {
        while (more() && peek() != '\n') ++i_;
      } else if (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t start = i_;
    while (more() && is_name_char(peek())) ++i_;
    if (i_ == start) fail("expected a rule name");
    return std::string(t_.substr(start, i_ - start));
  }

  int rule_id(const std::string& name, size_t at) {
    auto it = used_.find(name);
    if (it != used_.end()) return it->second.first;
    const int r = g_.declare_rule(name);
    used_.emplace(name, std::pair<int, size_t>{r, at});
    return r;
  }

  // A name followed by '::=' starts the next rule.
  bool at_rule_start() const {
    size_t k = i_;
    while (k < t_.size() && is_name_char(t_[k])) ++k;
    if (k == i_) return false;
    while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t' || t_[k] == '\n' || t_[k] == '\r')) ++k;
    return t_.substr(k, 3) == "::=";
  }

  int parse_alt() {
    if (++depth_ > GrammarLimits::max_nesting) fail("nesting deeper than " + std::to_string(GrammarLimits::max_nesting));
    std::vector<int> options = {parse_seq()};
    while (more() && peek() == '|') {
      ++i_;
      options.push_back(parse_seq());
    }
    --depth_;
    return g_.alt(std::move(options));
  }

  int parse_seq() {
    std::vector<int> parts;
    for (;;) {
      skip();
      if (!more() || peek() == '|' || peek() == ')' || at_rule_start()) break;
      parts.push_back(parse_item());
    }
    return g_.seq(std::move(parts));
  }

  bool read_int(int* out) {
    const size_t start = i_;
    long v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > GrammarLimits::max_repeat) fail("repetition count over " + std::to_string(GrammarLimits::max_repeat));
      ++i_;
    }
    *out = static_cast<int>(v);
    return i_ > start;
  }

  int parse_item() {
    int e = parse_primary();
    for (;;) {
      if (!more()) break;
      const char c = peek();
      if (c == '*') ++i_, e = g_.star(e);
      else if (c == '+') ++i_, e = g_.plus(e);
      else if (c == '?') ++i_, e = g_.opt(e);
      else if (c == '{') {
        ++i_;
        skip();
        int lo, hi;
        if (!read_int(&lo)) fail("expected a number after '{'");
        skip();
        hi = lo;
        if (more() && peek() == ',') {
          ++i_;
          skip();
          if (!read_int(&hi)) hi = -1;
          skip();
        }
        if (!more() || peek() != '}') fail("expected '}'");
        ++i_;
        if (hi >= 0 && hi < lo) fail("repetition has max < min");
        e = g_.repeat(e, lo, hi);
      } else {
        break;
      }
    }
    return e;
  }

  uint32_t read_hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (!more()) fail("truncated escape");
      const char c = peek();
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad hex digit in escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    return v;
  }

  uint32_t read_char() {  // one code point, escapes decoded
    if (peek() == '\\') {
      ++i_;
      if (!more()) fail("truncated escape");
      const char c = t_[i_++];
      switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'x': return read_hex(2);
        case 'u': return read_hex(4);
        case 'U': return read_hex(8);
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return static_cast<unsigned char>(c);
        default: --i_; fail(std::string("unknown escape \\") + c);
      }
    }
    const unsigned char c = static_cast<unsigned char>(peek());
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i_ + static_cast<size_t>(len) > t_.size()) fail("invalid UTF-8");
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(t_[i_ + static_cast<size_t>(k)]);
      if ((cc & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (cc & 0x3F);
    }
    i_ += static_cast<size_t>(len);
    return cp;
  }

  int parse_primary() {
    const char c = peek();
    if (c == '"') {
      ++i_;
      std::string bytes;
      for (;;) {
        if (!more()) fail("unterminated string");
        if (peek() == '"') break;
        const uint32_t cp = read_char();
        if (cp > kMaxCodepoint) fail("code point out of range");
        append_utf8(bytes, cp);
      }
      ++i_;
      return g_.literal(bytes);
    }
    if (c == '[') {
      ++i_;
      bool negate = false;
      if (more() && peek() == '^') negate = true, ++i_;
      CodepointSet set;
      for (;;) {
        if (!more()) fail("unterminated character class");
        if (peek() == ']') break;
        const uint32_t lo = read_char();
        uint32_t hi = lo;
        if (i_ + 1 < t_.size() && peek() == '-' && t_[i_ + 1] != ']') {
          ++i_;
          hi = read_char();
          if (hi < lo) fail("character range out of order");
        }
        set.add(lo, hi);
      }
      ++i_;
      if (negate) set = set.complement();
      if (set.empty()) fail("empty character class");
      return utf8_expr(g_, set);
    }
    if (c == '.') {
      ++i_;
      CodepointSet all;
      all.add(0, kMaxCodepoint);
      return utf8_expr(g_, all);
    }
    if (c == '(') {
      ++i_;
      const int e = parse_alt();
      skip();
      if (!more() || peek() != ')') fail("missing ')'");
      ++i_;
      return e;
    }
    if (is_name_char(c)) {
      const size_t at = i_;
      return g_.call(rule_id(read_name(), at));
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  Grammar& g_;
  std::string_view t_;
  size_t i_ = 0;
  int depth_ = 0;
  std::map<std::string, std::pair<int, size_t>> used_;  // name -> (rule, first offset)
  std::map<std::string, size_t> defined_;
};

}  // namespace

Grammar grammar_from_gbnf(std::string_view text) {
  Grammar g;
  GbnfParser(g, text).parse();
  return g;
}

}  // namespace servelab::grammar
