#pragma once
// GBNF (llama.cpp's grammar format) -> Grammar:
//   root ::= "{" ws pair ("," ws pair)* "}"      # comments run to the end of the line
//   pair ::= [a-z]+ ":" ws ( value | "null" )
// Rules are `name ::= alternatives`; a definition runs until the next `name ::=`. Items: string
// literals with escapes (\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), character classes [a-z], [^...]
// (code points), '.', rule names, groups, and * + ? {m} {m,} {m,n}. The start rule is `root`.
// Left recursion is refused (GrammarError naming the rule), as are undefined and doubly
// defined rules.
#include <string_view>

#include "engine/grammar/grammar.h"

namespace servelab::grammar {

Grammar grammar_from_gbnf(std::string_view text);

}  // namespace servelab::grammar
