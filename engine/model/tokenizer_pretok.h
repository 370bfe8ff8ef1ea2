#pragma once
// The pre-tokenizer: splits text into the words BPE runs on, implementing by hand the regexes
// Hugging Face tokenizer.json files carry (no regex engine: these patterns are fixed and a
// hand-written scanner is an order of magnitude faster).
#include <string_view>
#include <utility>
#include <vector>

namespace servelab {

/// Which split regex a tokenizer uses.
enum class SplitPattern {
  /// Llama-3 (max_digits 3) and Qwen2/Qwen3 (max_digits 1):
  /// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  llama3,
  /// GPT-2's, what ByteLevel with use_regex applies:
  /// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  gpt2,
};

/// A pre-tokenizer as tokenizer.json describes it.
struct PreTokenizerSpec {
  SplitPattern pattern = SplitPattern::llama3;
  int max_digits = 3;             ///< llama3 pattern: \p{N}{1,max_digits}
  bool add_prefix_space = false;  ///< ByteLevel: a space before text not starting with one
};

/// Recognises a Split regex from tokenizer.json; false when it is none of the known patterns.
bool parse_split_regex(std::string_view regex, PreTokenizerSpec* spec);

/// Appends to words the [begin, end) byte ranges of text's words, in order, covering text
/// exactly ("Isolated" behaviour). Matches are leftmost, first alternative first, as the regex
/// engines do. Invalid UTF-8 counts as punctuation ([^\s\p{L}\p{N}]).
void split_words(std::string_view text, const PreTokenizerSpec& spec,
                 std::vector<std::pair<size_t, size_t>>& words);

}  // namespace servelab
