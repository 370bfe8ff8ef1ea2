// The report's regex and choice checkers (the GBNF one is gbnf_check.cpp).
#include "analysis/constraint_check.h"

#include <cctype>
#include <cstdint>
#include <map>
#include <regex>

#include "analysis/big_stack.h"

namespace servelab::analysis {
namespace constraint_check_detail {  // named: a unity batch shares one translation unit

std::wstring utf8_to_wide_for_regex(std::string_view s) {  // input: valid UTF-8 (checked by the caller)
  std::wstring out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len && i + static_cast<size_t>(k) < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
    out += static_cast<wchar_t>(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

/// What std::regex must not be given: a backreference (\1: structured output's regexes have none,
/// and libstdc++ overflows on a long one) or a repetition count over 1000 (it copies the
/// repeated states that many times). "" when neither.
std::string regex_pattern_problem(const std::string& p) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\') {
      if (i + 1 < p.size() && p[i + 1] >= '1' && p[i + 1] <= '9')
        return "pattern has a backreference (\\" + std::string(1, p[i + 1]) + "), which structured output does not support";
      ++i;  // an escaped character
    } else if (p[i] == '{') {  // {n}, {n,}, {n,m}: each count at most 1000
      size_t j = i + 1;
      while (j < p.size()) {
        const size_t b = j;
        while (j < p.size() && std::isdigit(static_cast<unsigned char>(p[j]))) ++j;
        if (j - b > 4 || (j > b && std::stoi(p.substr(b, j - b)) > 1000))
          return "pattern repeats something over 1000 times, more than this checker expands";
        if (j >= p.size() || p[j] != ',') break;
        ++j;
      }
    }
  }
  return "";
}

}  // namespace constraint_check_detail

bool is_well_formed_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) need = 0;
    else if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (need > 0 && i + need >= s.size()) return false;
    for (size_t k = 1; k <= need; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += need + 1;
  }
  return true;
}

std::string check_regex_output(std::string_view text, const std::string& pattern) {
  using namespace constraint_check_detail;
  if (!is_well_formed_utf8(text)) return "not valid UTF-8";
  static std::map<std::string, std::wregex> cache;  // the report's thread only
  auto it = cache.find(pattern);
  if (it == cache.end()) {
    if (std::string why = regex_pattern_problem(pattern); !why.empty()) return why;
    try {
      it = cache.emplace(pattern, std::wregex(utf8_to_wide_for_regex(pattern), std::regex::ECMAScript)).first;
    } catch (const std::regex_error& e) {
      return std::string("pattern not readable by std::regex: ") + e.what();
    }
  }
  // libstdc++'s executor backtracks recursively, a few frames per character: a big stack.
  const std::wstring wide = utf8_to_wide_for_regex(text);
  const std::wregex& re = it->second;
  try {
    if (call_on_big_stack([&] { return std::regex_match(wide, re); })) return "";
  } catch (const std::regex_error& e) {  // error_complexity / error_stack
    return std::string("output too complex for std::regex to check: ") + e.what();
  }
  return "does not match the regex";
}

std::string check_choice_output(std::string_view text, const std::vector<std::string>& choices) {
  for (const auto& c : choices)
    if (text == c) return "";
  return "not one of the " + std::to_string(choices.size()) + " choices";
}

}  // namespace servelab::analysis
