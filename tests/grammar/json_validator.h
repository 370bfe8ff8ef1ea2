#pragma once
// An independent JSON Schema validator for the tests: parses the output with nlohmann_json and
// checks it against the subset the grammar engine supports, written from the spec and sharing
// no code with the engine (patterns and formats go through std::wregex).
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace servelab::grammar::testing {

/// "" when text is one JSON value valid against schema; else why not.
std::string validate_json_text(std::string_view text, const nlohmann::ordered_json& schema);

}  // namespace servelab::grammar::testing
