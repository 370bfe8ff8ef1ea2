#pragma once
// Independent checkers of structured outputs for the kinds other than JSON Schema (that one is
// json_schema_check.h), written for the report and sharing no code with the grammar engine:
//   regex:   the whole output matches the pattern (std::wregex, ECMAScript, over code points);
//   choice:  the output is exactly one of the choices;
//   grammar: the output is derived from the GBNF grammar's root (gbnf_check.cpp: a memoized
//            recognizer over code points, llama.cpp's syntax).
#include <string>
#include <string_view>
#include <vector>

namespace servelab::analysis {

/// Whether s is well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or values past U+10FFFF).
bool is_well_formed_utf8(std::string_view s);

/// "" when the whole text matches the pattern; else why not (also for a pattern std::regex
/// cannot read).
std::string check_regex_output(std::string_view text, const std::string& pattern);

/// "" when text is one of the choices; else why not.
std::string check_choice_output(std::string_view text, const std::vector<std::string>& choices);

/// "" when text derives from the grammar's `root` rule; else why not (also for a grammar this
/// checker cannot read, naming the line).
std::string check_gbnf_output(std::string_view text, const std::string& gbnf);

}  // namespace servelab::analysis
