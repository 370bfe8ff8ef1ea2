#pragma once
// An independent JSON Schema validator: parses an output with nlohmann_json and checks it against
// the subset the grammar engine supports, written from the spec and sharing no code with the
// engine (patterns and formats go through std::wregex). The grammar tests check the engine with
// it; reports use it for the validity rate of structured-output runs (structured_stats.h).
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace servelab::analysis {

/// "" when text is one JSON value valid against schema; else why not.
std::string validate_json_text(std::string_view text, const nlohmann::ordered_json& schema);

}  // namespace servelab::analysis
