#pragma once
// Regular expressions (a practical subset of ECMAScript/Python syntax) as grammar expressions:
// literals and escapes, classes with ranges and negation (code points, any Unicode), \d \w \s
// and their negations, '.', alternation, groups ((...), (?:...), named), ? * + {m} {m,} {m,n}
// (lazy forms accepted: the language is the same), ^ and $ at the ends. Refused with a
// GrammarError naming the construct and its offset: backreferences, lookaround, \b, inline flags,
// \p{...}, anchors inside the pattern.
#include <string>
#include <string_view>

#include "engine/grammar/grammar.h"

namespace servelab::grammar {

enum class RegexMode {
  text,         ///< the output is the match itself (vLLM's guided_regex); anchors are implied
  json_string,  ///< the match is a JSON string's content, written escaped (JSON Schema "pattern";
                ///< unanchored ends match anything there, as the spec's search semantics say)
};

/// Adds the pattern's language to g and returns its expression. `where` starts error messages
/// ("regex", "json_schema: pattern at /properties/id").
int add_regex(Grammar& g, std::string_view pattern, RegexMode mode, const std::string& where);

/// A grammar whose root matches exactly the pattern (text mode).
Grammar grammar_from_regex(std::string_view pattern);

}  // namespace servelab::grammar
