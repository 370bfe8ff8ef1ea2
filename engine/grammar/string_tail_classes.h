#pragma once
// Token classes of a bounded JSON string's tail without walking the vocabulary trie.
//
// A tail (JsonTerms::string_tail) is one rule per (characters left, characters needed): at most
// `left` more characters, at least `need`, then the closing quote; characters are raw UTF-8 code
// points >= 0x20 other than '"' and '\', or the escapes \" \\ \/ \b \f \n \r \t. Each tail has
// nine resting states: its start, and eight inside a character (after a backslash, after each
// kind of UTF-8 lead byte, after a lead and one continuation byte...). `maxLength: 64` makes 65
// tails, so 585 states, and a walk of the trie per state costs up to a second per tokenizer.
//
// From any of those states a token's fate depends only on the bytes of the character begun
// before it (`pending`: empty at the start, "\\" after a backslash, "\xE0" after that lead byte,
// ...) and on how many characters the token completes before a closing quote. So one pass over
// the vocabulary per `pending` records every token's fate, and the classes of that state in every
// tail follow from it: they differ only by how far a token may run (`left`) and how soon it may
// close (`need`). Equal to compute_token_classes at each state
// (tests/grammar/token_classes_test.cpp).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/automaton.h"
#include "engine/grammar/token_classes.h"
#include "engine/grammar/token_table.h"

namespace servelab::grammar {

/// Every token's fate from the tail states reached after `pending`, then each tail's classes.
class StringTailScan {
 public:
  /// One pass over the tokens whose first byte can follow `pending`. Throws
  /// std::invalid_argument when `pending` is not empty and not the start of one character.
  StringTailScan(const TokenTable& tokens, std::string_view pending);

  /// The classes in json:string_tail{left, need} (left >= 0, need >= 0) at the state reached
  /// from its start by `pending`. Cheapest when called with `left` ascending: each call then
  /// adds only the tokens that the larger `left` lets through.
  TokenClasses classes(int left, int need);

  size_t n_scanned() const { return n_scanned_; }  ///< tokens whose bytes the pass read

 private:
  struct Quoted {
    int chars;             ///< characters before the closing quote (the pending one counted)
    int32_t id;
    int next;              ///< the byte after the quote, or -1 when the quote ends the token
  };
  const TokenTable& tt_;
  /// Tokens without a closing quote, by the characters they take from the tail (the pending
  /// character counted, and one more when the token ends inside a character).
  std::vector<std::vector<int32_t>> open_by_chars_;
  std::vector<Quoted> quoted_;
  size_t n_scanned_ = 0;
  // Accepted open tokens for left = running_left_ (-1: none yet), as mask words.
  std::vector<uint32_t> running_bits_;
  int running_left_ = -1;
};

/// The shortest byte string (the smallest of them) that leads from the start of `state`'s rule
/// to `state` over byte edges alone. Throws std::invalid_argument when no such string exists.
std::string bytes_from_rule_start(const Automaton& a, int32_t state);

}  // namespace servelab::grammar
