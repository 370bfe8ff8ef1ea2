#pragma once
// Sets of Unicode code points (regex and GBNF character classes) and their UTF-8 byte automata:
// a class becomes the alternatives of byte-range sequences that encode exactly its code points
// (surrogates never), either raw or as the characters of a JSON string's content.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"

namespace servelab::grammar {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

/// A set of code points as sorted, disjoint, non-adjacent inclusive ranges.
class CodepointSet {
 public:
  struct Range {
    uint32_t lo, hi;
  };
  void add(uint32_t lo, uint32_t hi);
  void add(uint32_t cp) { add(cp, cp); }
  void add(const CodepointSet& other);
  /// Everything in [0, kMaxCodepoint] not in the set.
  CodepointSet complement() const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<Range>& ranges() const;

 private:
  mutable std::vector<Range> ranges_;
  mutable bool normal_ = true;
};

/// Appends cp's UTF-8 encoding.
void append_utf8(std::string& out, uint32_t cp);

/// One code point of the set, UTF-8 encoded (surrogates left out).
int utf8_expr(Grammar& g, const CodepointSet& set);

/// One code point of the set as it is written inside a JSON string: '"' and '\' escaped, control
/// characters as \n, \t, ... or \u00XX, everything else raw UTF-8. One encoding per code point.
int json_char_expr(Grammar& g, const CodepointSet& set);

}  // namespace servelab::grammar
