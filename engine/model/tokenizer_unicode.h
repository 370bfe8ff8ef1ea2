#pragma once
// The Unicode the tokenizers need, without ICU: UTF-8 stepping, the letter/number/space classes
// of the pre-tokenizer regexes, and NFC. Tables are generated (scripts/gen-unicode-tables.py,
// Unicode 14.0 from Python's unicodedata) into unicode_tables.cpp.
#include <cstdint>
#include <string>
#include <string_view>

namespace servelab::unicode {

/// Decodes the code point at text[pos] and stores its byte length in *len (1..4). An invalid
/// sequence decodes as kInvalid with *len the length of its maximal valid prefix (at least 1),
/// the unit Unicode and Rust's from_utf8_lossy replace by one U+FFFD.
char32_t decode_at(std::string_view text, size_t pos, int* len);
inline constexpr char32_t kInvalid = 0xFFFFFFFF;

/// Appends code point cp as UTF-8.
void append_utf8(std::string& out, char32_t cp);

/// text with each invalid UTF-8 unit (see decode_at) replaced by U+FFFD, as from_utf8_lossy.
std::string to_valid_utf8(std::string_view text);

/// The classes the pre-tokenizer regexes use.
enum class CharClass : uint8_t {
  other,   ///< punctuation, symbols, marks, controls, invalid bytes
  letter,  ///< \p{L}: Lu Ll Lt Lm Lo
  number,  ///< \p{N}: Nd Nl No
  space,   ///< \s: the White_Space property (Oniguruma's \s, as Hugging Face tokenizers uses)
};
CharClass char_class(char32_t cp);

/// Canonical combining class (0 for starters and unassigned code points).
uint8_t combining_class(char32_t cp);

/// Unicode Normalization Form C of text (invalid bytes pass through unchanged, as starters).
std::string nfc(std::string_view text);

/// True when nfc(text) == text is certain without running the algorithm (every code point is a
/// starter that neither decomposes nor composes with what precedes it). Fast on ASCII.
bool nfc_quick_check(std::string_view text);

}  // namespace servelab::unicode
