#pragma once
// The structured-output constraint of an OpenAI / vLLM request body, as a pure function (the
// HTTP server turns GrammarError into a 400 with its message):
//   response_format: {type: "text" | "json_object" | "json_schema", json_schema: {name, schema, strict}}
//   structured_outputs: {json | regex | choice | grammar | json_object}          (vLLM)
//   guided_json, guided_regex, guided_choice, guided_grammar                      (vLLM, older)
// Null fields count as absent; more than one constraint is an error.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"

namespace servelab::grammar {

enum class ConstraintKind { json_schema, json_object, regex, choice, grammar };

/// "json_schema", "json_object", "regex", "choice", "grammar".
const char* constraint_kind_name(ConstraintKind kind);

/// One request's constraint.
struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::json_object;
  std::string source;                ///< the schema (JSON text), the regex or the GBNF text
  std::vector<std::string> choices;  ///< kind choice
  std::string field;                 ///< where it came from: "response_format", "structured_outputs.json", ...
};

/// The body's constraint, nullopt when it has none. Throws GrammarError naming the field for a
/// malformed or unsupported one. Pass ordered_json to keep a schema's property order (a plain
/// nlohmann::json has already sorted its keys).
std::optional<ConstraintSpec> parse_request_constraint(const nlohmann::ordered_json& body);
std::optional<ConstraintSpec> parse_request_constraint(const nlohmann::json& body);

/// The spec's grammar (front end by kind). Throws GrammarError.
Grammar grammar_from_constraint(const ConstraintSpec& spec);

}  // namespace servelab::grammar
