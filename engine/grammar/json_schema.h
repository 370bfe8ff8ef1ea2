#pragma once
// JSON Schema -> Grammar. Supported (docs/structured-output.md has the full list): type (and type
// lists), properties (written in schema order; optional ones may be left out), required,
// additionalProperties (false / true / a schema; when absent: false if "properties" is given,
// else any members), enum, const, items, minItems, maxItems, anyOf / oneOf (as alternatives),
// allOf with one schema, $ref to "#", "#/$defs/..", "#/definitions/.." or any local pointer
// (recursion included), minLength / maxLength, pattern, the formats date, time, date-time,
// email, uuid, uri, ipv4, hostname (others are annotations), minimum / maximum and the exclusive
// forms (integers exactly; numbers tightened to integer bounds). Unsupported validation keywords
// raise GrammarError naming the keyword and its JSON pointer; unknown keywords are ignored.
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"

namespace servelab::grammar {

/// The grammar of the JSON texts valid against the schema (within the documented subset).
/// Use ordered_json so properties keep the schema's order.
Grammar grammar_from_json_schema(const nlohmann::ordered_json& schema);
/// Parses the schema text first (GrammarError when it is not JSON).
Grammar grammar_from_json_schema_text(std::string_view schema_text);
/// Any JSON object (OpenAI's response_format json_object).
Grammar grammar_json_object();

}  // namespace servelab::grammar
