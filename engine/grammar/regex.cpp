// The regex front end: a recursive-descent parser straight to grammar expressions.
#include "engine/grammar/regex.h"

#include "engine/grammar/codepoints.h"
#include "engine/grammar/grammar_error.h"

namespace servelab::grammar {
namespace {

CodepointSet digits() {
  CodepointSet s;
  s.add('0', '9');
  return s;
}
CodepointSet word() {
  CodepointSet s;
  s.add('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_');
  return s;
}
CodepointSet space() {
  CodepointSet s;
  for (char c : std::string_view(" \t\n\r\f\v")) s.add(static_cast<unsigned char>(c));
  return s;
}

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view p, RegexMode mode, const std::string& where)
      : g_(g), p_(p), mode_(mode), where_(where) {}

  int parse_all() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      i_ = 1;
    }
    if (p_.size() > i_ && p_.back() == '$' && !escaped_at(p_.size() - 1)) {
      anchored_end = true;
      p_.remove_suffix(1);
    }
    const int body = parse_alt();
    if (i_ < p_.size()) fail(p_[i_] == ')' ? "unbalanced ')'" : "unexpected character");
    if (mode_ == RegexMode::text) return body;
    std::vector<int> parts;
    if (!anchored_start) parts.push_back(g_.star(any_json_char()));
    parts.push_back(body);
    if (!anchored_end) parts.push_back(g_.star(any_json_char()));
    return g_.seq(std::move(parts));
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw GrammarError(where_ + ": " + what + " at offset " + std::to_string(i_) + " of pattern \"" + std::string(p_) + "\"");
  }
  bool escaped_at(size_t pos) const {  // an odd run of backslashes before pos
    size_t k = 0;
    while (k < pos && p_[pos - 1 - k] == '\\') ++k;
    return k % 2 == 1;
  }
  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  int any_json_char() {
    CodepointSet all;
    all.add(0, kMaxCodepoint);
    return json_char_expr(g_, all);
  }
  int chars(const CodepointSet& set) {
    if (set.empty()) fail("empty character class");
    return mode_ == RegexMode::text ? utf8_expr(g_, set) : json_char_expr(g_, set);
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
    while (more() && peek() != '|' && peek() != ')') parts.push_back(parse_repeat());
    return g_.seq(std::move(parts));
  }

  bool read_int(int* out) {
    const size_t start = i_;
    long v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > 1'000'000) fail("repetition count too large");
      ++i_;
    }
    *out = static_cast<int>(v);
    return i_ > start;
  }

  int parse_repeat() {
    int e = parse_atom();
    while (more()) {
      const char c = peek();
      int lo, hi;
      if (c == '*' || c == '+' || c == '?') {
        ++i_;
        lo = c == '+' ? 1 : 0;
        hi = c == '?' ? 1 : -1;
      } else if (c == '{') {
        const size_t save = i_++;
        if (!read_int(&lo)) {  // not a quantifier: a literal '{'
          i_ = save;
          break;
        }
        hi = lo;
        if (more() && peek() == ',') {
          ++i_;
          if (!read_int(&hi)) hi = -1;
        }
        if (!more() || peek() != '}') {
          i_ = save;
          break;
        }
        ++i_;
        if (hi >= 0 && hi < lo) fail("repetition {" + std::to_string(lo) + "," + std::to_string(hi) + "} has max < min");
        if (lo > GrammarLimits::max_repeat || hi > GrammarLimits::max_repeat)
          fail("repetition count over " + std::to_string(GrammarLimits::max_repeat));
      } else {
        break;
      }
      if (more() && peek() == '?') ++i_;  // lazy: same language
      else if (more() && peek() == '+') fail("possessive quantifiers are not supported");
      e = g_.repeat(e, lo, hi);
    }
    return e;
  }

  uint32_t read_hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (!more()) fail("truncated hex escape");
      const char c = peek();
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad hex digit in escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    return v;
  }

  uint32_t read_utf8() {
    const unsigned char c = static_cast<unsigned char>(p_[i_]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i_ + static_cast<size_t>(len) > p_.size()) fail("invalid UTF-8 in pattern");
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(p_[i_ + static_cast<size_t>(k)]);
      if ((cc & 0xC0) != 0x80) fail("invalid UTF-8 in pattern");
      cp = (cp << 6) | (cc & 0x3F);
    }
    i_ += static_cast<size_t>(len);
    return cp;
  }

  // After a backslash: a class escape (\d ...) into *set, or one code point.
  bool parse_escape(CodepointSet* set, uint32_t* cp, bool in_class) {
    if (!more()) fail("pattern ends with a backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd': *set = digits(); return true;
      case 'D': *set = digits().complement(); return true;
      case 'w': *set = word(); return true;
      case 'W': *set = word().complement(); return true;
      case 's': *set = space(); return true;
      case 'S': *set = space().complement(); return true;
      case 'n': *cp = '\n'; return false;
      case 't': *cp = '\t'; return false;
      case 'r': *cp = '\r'; return false;
      case 'f': *cp = '\f'; return false;
      case 'v': *cp = '\v'; return false;
      case '0': *cp = 0; return false;
      case 'x': *cp = read_hex(2); return false;
      case 'u': *cp = read_hex(4); return false;
      case 'b':
        if (in_class) {
          *cp = '\b';
          return false;
        }
        --i_;
        fail("word boundaries (\\b) are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') {
      --i_;
      fail("backreferences are not supported");
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      --i_;
      fail(std::string("unsupported escape \\") + c);
    }
    --i_;
    *cp = read_utf8();
    return false;
  }

  CodepointSet parse_class() {  // after '['
    CodepointSet set;
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++i_;
    }
    bool first = true;
    for (;;) {
      if (!more()) fail("unterminated character class");
      if (peek() == ']' && !first) break;
      first = false;
      CodepointSet cls;
      uint32_t lo;
      if (peek() == '\\') {
        ++i_;
        if (parse_escape(&cls, &lo, true)) {
          set.add(cls);
          continue;
        }
      } else if (peek() == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
        fail("POSIX classes ([:alpha:]) are not supported");
      } else {
        lo = read_utf8();
      }
      uint32_t hi = lo;
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          ++i_;
          if (parse_escape(&cls, &hi, true)) fail("a class escape cannot end a range");
        } else {
          hi = read_utf8();
        }
        if (hi < lo) fail("character range out of order");
      }
      set.add(lo, hi);
    }
    ++i_;  // ']'
    return negate ? set.complement() : set;
  }

  int parse_atom() {
    const char c = peek();
    switch (c) {
      case '(': {
        ++i_;
        if (more() && peek() == '?') {
          ++i_;
          if (more() && peek() == ':') {
            ++i_;
          } else if (more() && (peek() == '<' || peek() == 'P')) {
            if (peek() == 'P') ++i_;
            if (!more() || peek() != '<') fail("unsupported group syntax");
            if (i_ + 1 < p_.size() && (p_[i_ + 1] == '=' || p_[i_ + 1] == '!')) fail("lookbehind is not supported");
            while (more() && peek() != '>') ++i_;
            if (!more()) fail("unterminated group name");
            ++i_;
          } else if (more() && (peek() == '=' || peek() == '!')) {
            fail("lookahead is not supported");
          } else {
            fail("inline flags and other (?...) groups are not supported");
          }
        }
        const int e = parse_alt();
        if (!more() || peek() != ')') fail("missing ')'");
        ++i_;
        return e;
      }
      case '[': {
        ++i_;
        return chars(parse_class());
      }
      case '.': {
        ++i_;
        CodepointSet nl;
        nl.add('\n');
        nl.add('\r');
        return chars(nl.complement());
      }
      case '\\': {
        ++i_;
        CodepointSet set;
        uint32_t cp;
        if (parse_escape(&set, &cp, false)) return chars(set);
        CodepointSet one;
        one.add(cp);
        return chars(one);
      }
      case '^':
      case '$': fail("anchors inside the pattern are not supported");
      case '*':
      case '+':
      case '?': fail("quantifier without anything to repeat");
      default: {
        CodepointSet one;
        one.add(read_utf8());
        return chars(one);
      }
    }
  }

  Grammar& g_;
  std::string_view p_;
  RegexMode mode_;
  std::string where_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

int add_regex(Grammar& g, std::string_view pattern, RegexMode mode, const std::string& where) {
  return RegexParser(g, pattern, mode, where).parse_all();
}

Grammar grammar_from_regex(std::string_view pattern) {
  Grammar g;
  const int root = g.declare_rule("root");
  g.define_rule(root, add_regex(g, pattern, RegexMode::text, "regex"));
  g.set_root(root);
  return g;
}

}  // namespace servelab::grammar
