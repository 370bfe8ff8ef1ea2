#pragma once
// One entry of a structured-output set as a line of a run folder's schemas.jsonl, shared by the
// load generator (which writes and sends it) and the report (which validates outputs against it):
//   json_schema: the schema object itself (as runs before other kinds were built wrote it)
//   regex:       {"kind": "regex", "regex": "<pattern>"}
//   choice:      {"kind": "choice", "choice": ["a", "b", ...]}
//   grammar:     {"kind": "grammar", "grammar": "<GBNF text>"}
#include <string>

#include <nlohmann/json.hpp>

namespace servelab {

struct ConstraintEntry {
  std::string kind;              ///< json_schema, regex, choice or grammar
  nlohmann::ordered_json value;  ///< the schema, the pattern, the list of choices, the GBNF text
};

/// The kinds a set can hold, for messages: "json_schema, regex, choice or grammar".
const char* constraint_kinds_text();
bool is_constraint_kind(const std::string& kind);

/// The entry's schemas.jsonl line (compact JSON, a schema's key order kept).
std::string constraint_line(const ConstraintEntry& e);

/// Reads a line back. Throws std::invalid_argument saying what is wrong (the caller adds path:line).
ConstraintEntry parse_constraint_line(const std::string& line);

}  // namespace servelab
