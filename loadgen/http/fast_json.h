#pragma once
// A small validating JSON reader over a string_view, without allocation: the hot path of the
// HTTP driver reads hundreds of thousands of stream chunks a second, and only a few fields of
// each. Strings are returned raw (escapes left in); callers that need decoded text parse again.
#include <cstdint>
#include <string_view>

namespace servelab::http_load {

namespace fast_json_detail {
/// Bytes a JSON string may hold as they are: 0x20..0x7F but '"' and '\\'.
struct PlainTable {
  bool v[256] = {};
  constexpr PlainTable() {
    for (int c = 0x20; c < 0x80; ++c) v[c] = c != '"' && c != '\\';
  }
  constexpr bool operator[](unsigned char c) const { return v[c]; }
};
inline constexpr PlainTable kPlain{};
}  // namespace fast_json_detail

class JsonCursor {
 public:
  explicit JsonCursor(std::string_view s) : s_(s) {}
  bool ok() const { return ok_; }
  void fail() { ok_ = false; }
  // Loops work on locals: a char read may alias i_, so the compiler would store i_ every byte.
  void ws() {
    const char* d = s_.data();
    const size_t n = s_.size();
    size_t i = i_;
    while (i < n && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r')) ++i;
    i_ = i;
  }
  char peek() {
    if (i_ < s_.size() && static_cast<unsigned char>(s_[i_]) > ' ') return s_[i_];  // no whitespace: most calls
    ws();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  bool eat(char c) {
    if (peek() != c) return false;
    ++i_;
    return true;
  }
  bool at_end() {
    ws();
    return i_ == s_.size();
  }
  /// A string's raw contents (between the quotes, escapes kept).
  bool string(std::string_view& out) {
    if (!eat('"')) return fail(), false;
    const size_t start = i_;
    while (i_ < s_.size()) {
      // Plain printable ASCII (most of a stream's bytes): one table look-up per byte.
      {
        const char* d = s_.data();
        const size_t n = s_.size();
        size_t i = i_;
        while (i < n && fast_json_detail::kPlain[static_cast<unsigned char>(d[i])]) ++i;
        i_ = i;
      }
      if (i_ >= s_.size()) break;
      const char c = s_[i_];
      if (c == '"') {
        out = s_.substr(start, i_ - start);
        ++i_;
        return true;
      }
      const unsigned char u = static_cast<unsigned char>(c);
      if (u < 0x20) break;
      if (u >= 0x80) {  // UTF-8 must be well formed (RFC 3629), as JSON parsers check
        if (!utf8_sequence()) break;
        continue;
      }
      if (c == '\\') {
        if (++i_ >= s_.size()) break;
        const char e = s_[i_];
        if (e == 'u') {
          int cp = 0;
          if (!hex4(i_ + 1, cp)) break;
          i_ += 4;
          if (cp >= 0xDC00 && cp <= 0xDFFF) break;  // a lone low surrogate
          if (cp >= 0xD800 && cp <= 0xDBFF) {       // must be followed by \uDC00-\uDFFF
            int lo = 0;
            if (i_ + 2 >= s_.size() || s_[i_ + 1] != '\\' || s_[i_ + 2] != 'u' || !hex4(i_ + 3, lo) || lo < 0xDC00 ||
                lo > 0xDFFF)
              break;
            i_ += 6;
          }
        } else if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't') {
          break;
        }
      }
      ++i_;
    }
    return fail(), false;
  }
  bool number(int64_t* out = nullptr) {
    ws();
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') {  // no leading zeros
      ++i_;
      if (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') return fail(), false;
    } else if (!digits()) {
      return fail(), false;
    }
    bool integral = true;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      integral = false;
      if (!digits()) return fail(), false;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      integral = false;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return fail(), false;
    }
    if (out && integral && i_ - start < 18) {
      int64_t v = 0;
      size_t k = start + (s_[start] == '-');
      for (; k < i_; ++k) v = v * 10 + (s_[k] - '0');
      *out = s_[start] == '-' ? -v : v;
    } else if (out) {
      *out = -1;
    }
    return true;
  }
  bool literal(std::string_view word) {
    ws();
    if (s_.substr(i_, word.size()) != word) return fail(), false;
    i_ += word.size();
    return true;
  }
  /// Skips any value, validating it. `depth` bounds nesting (hostile input).
  bool skip(int depth = 0) {
    if (depth > 64) return fail(), false;
    switch (peek()) {
      case '{': {
        ++i_;
        if (eat('}')) return true;
        do {
          std::string_view k;
          if (!string(k) || !eat(':') || !skip(depth + 1)) return fail(), false;
        } while (eat(','));
        return eat('}') || (fail(), false);
      }
      case '[': {
        ++i_;
        if (eat(']')) return true;
        do {
          if (!skip(depth + 1)) return fail(), false;
        } while (eat(','));
        return eat(']') || (fail(), false);
      }
      case '"': {
        std::string_view v;
        return string(v);
      }
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      default: return number();
    }
  }

 private:
  static bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
  bool hex4(size_t at, int& cp) const {
    cp = 0;
    for (size_t k = 0; k < 4; ++k) {
      if (at + k >= s_.size() || !is_hex(s_[at + k])) return false;
      const char h = s_[at + k];
      cp = cp * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return true;
  }
  /// One multi-byte UTF-8 character at i_; advances past it.
  bool utf8_sequence() {
    auto byte = [&](size_t k) { return i_ + k < s_.size() ? static_cast<unsigned char>(s_[i_ + k]) : 0u; };
    const unsigned b0 = byte(0);
    unsigned lo = 0x80, hi = 0xBF;
    int n = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 1;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
      n = 2;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      n = 3;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    const unsigned b1 = byte(1);
    if (b1 < lo || b1 > hi) return false;
    for (int k = 2; k <= n; ++k)
      if (byte(k) < 0x80 || byte(k) > 0xBF) return false;
    i_ += n + 1;
    return true;
  }
  bool digits() {
    const char* d = s_.data();
    const size_t n = s_.size(), start = i_;
    size_t i = i_;
    while (i < n && d[i] >= '0' && d[i] <= '9') ++i;
    i_ = i;
    return i > start;
  }
  std::string_view s_;
  size_t i_ = 0;
  bool ok_ = true;
};

}  // namespace servelab::http_load
