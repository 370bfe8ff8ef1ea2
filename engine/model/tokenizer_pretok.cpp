#include "engine/model/tokenizer_pretok.h"

#include <string>

#include "engine/model/tokenizer_unicode.h"

namespace servelab {
namespace {

using unicode::CharClass;

// The text as code points with their classes and byte offsets (offset[n] = text.size()).
struct Chars {
  std::vector<char32_t> cp;
  std::vector<CharClass> cls;
  std::vector<size_t> offset;

  void load(std::string_view text) {
    cp.clear(), cls.clear(), offset.clear();
    for (size_t i = 0; i < text.size();) {
      int len;
      const char32_t c = unicode::decode_at(text, i, &len);
      cp.push_back(c);
      cls.push_back(unicode::char_class(c));
      offset.push_back(i);
      i += len;
    }
    offset.push_back(text.size());
  }
};

bool is_crlf(char32_t c) { return c == U'\r' || c == U'\n'; }
char32_t ascii_lower(char32_t c) { return c >= U'A' && c <= U'Z' ? c + 32 : c; }

// Length in chars of a contraction at i ('s 't 're 've 'm 'll 'd), 0 if none.
size_t contraction(const Chars& s, size_t i, bool case_insensitive) {
  const size_t n = s.cp.size();
  if (s.cp[i] != U'\'' || i + 1 >= n) return 0;
  const auto at = [&](size_t k) { return case_insensitive ? ascii_lower(s.cp[k]) : s.cp[k]; };
  const char32_t a = at(i + 1);
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 < n) {
    const char32_t b = at(i + 2);
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  }
  return 0;
}

size_t run_of(const Chars& s, size_t i, CharClass c) {
  size_t j = i;
  while (j < s.cp.size() && s.cls[j] == c) ++j;
  return j;
}

// \s+(?!\S) then \s+, at a whitespace run starting at i.
size_t trailing_space_rule(const Chars& s, size_t i) {
  const size_t e = run_of(s, i, CharClass::space);
  if (e == s.cp.size() || e - i == 1) return e;  // at the end, or \s+ of one
  return e - 1;                                  // leave the last space to the next word
}

// One match of the Llama-3/Qwen2 pattern at i; returns its end (in chars).
size_t match_llama3(const Chars& s, size_t i, int max_digits) {
  const size_t n = s.cp.size();
  if (size_t k = contraction(s, i, true)) return i + k;
  const CharClass c = s.cls[i];
  if (c == CharClass::letter) return run_of(s, i, CharClass::letter);
  if (c != CharClass::number && !is_crlf(s.cp[i]) && i + 1 < n && s.cls[i + 1] == CharClass::letter)
    return run_of(s, i + 1, CharClass::letter);
  if (c == CharClass::number) {
    size_t j = i;
    while (j < n && j - i < size_t(max_digits) && s.cls[j] == CharClass::number) ++j;
    return j;
  }
  const size_t start = s.cp[i] == U' ' && i + 1 < n && s.cls[i + 1] == CharClass::other ? i + 1 : i;
  if (s.cls[start] == CharClass::other) {
    size_t j = run_of(s, start, CharClass::other);
    while (j < n && is_crlf(s.cp[j])) ++j;
    return j;
  }
  // Whitespace: \s*[\r\n]+ ends at the run's last line break; else \s+(?!\S) | \s+.
  const size_t e = run_of(s, i, CharClass::space);
  for (size_t j = e; j > i; --j)
    if (is_crlf(s.cp[j - 1])) return j;
  return trailing_space_rule(s, i);
}

size_t match_gpt2(const Chars& s, size_t i) {
  const size_t n = s.cp.size();
  if (size_t k = contraction(s, i, false)) return i + k;
  const size_t start = s.cp[i] == U' ' && i + 1 < n && s.cls[i + 1] != CharClass::space ? i + 1 : i;
  if (s.cls[start] != CharClass::space) return run_of(s, start, s.cls[start]);
  return trailing_space_rule(s, i);
}

}  // namespace

bool parse_split_regex(std::string_view regex, PreTokenizerSpec* spec) {
  const std::string llama3_head = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})";
  const std::string llama3_tail = R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (regex == llama3_head + "{1,3}" + llama3_tail) {
    spec->pattern = SplitPattern::llama3, spec->max_digits = 3;
    return true;
  }
  if (regex == llama3_head + llama3_tail) {
    spec->pattern = SplitPattern::llama3, spec->max_digits = 1;
    return true;
  }
  if (regex == R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)") {
    spec->pattern = SplitPattern::gpt2;
    return true;
  }
  return false;
}

void split_words(std::string_view text, const PreTokenizerSpec& spec, std::vector<std::pair<size_t, size_t>>& words) {
  thread_local Chars s;
  s.load(text);
  for (size_t i = 0; i < s.cp.size();) {
    const size_t j = spec.pattern == SplitPattern::gpt2 ? match_gpt2(s, i) : match_llama3(s, i, spec.max_digits);
    words.emplace_back(s.offset[i], s.offset[j]);
    i = j;
  }
}

}  // namespace servelab
