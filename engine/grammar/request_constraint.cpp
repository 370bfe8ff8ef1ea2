// Reading the constraint fields of a request body.
#include "engine/grammar/request_constraint.h"

#include "engine/grammar/gbnf.h"
#include "engine/grammar/grammar_error.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex.h"

namespace servelab::grammar {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& message) { throw GrammarError(message); }

bool present(const ojson& obj, const char* key) { return obj.contains(key) && !obj[key].is_null(); }

std::string string_field(const ojson& v, const std::string& field) {
  if (!v.is_string() || v.get<std::string>().empty()) bad(field + " must be a non-empty string");
  return v.get<std::string>();
}

// A schema given as an object (or boolean), or as JSON text.
std::string schema_field(const ojson& v, const std::string& field) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    try {
      const ojson parsed = ojson::parse(v.get<std::string>());
      if (parsed.is_object() || parsed.is_boolean()) return parsed.dump();
    } catch (const nlohmann::json::exception&) {
    }
    bad(field + " is a string but not a JSON schema object");
  }
  bad(field + " must be a JSON schema object");
}

std::vector<std::string> choice_field(const ojson& v, const std::string& field) {
  if (!v.is_array() || v.empty()) bad(field + " must be a non-empty array of strings");
  std::vector<std::string> out;
  for (const ojson& c : v) {
    if (!c.is_string()) bad(field + " must be a non-empty array of strings");
    out.push_back(c.get<std::string>());
  }
  return out;
}

void add(std::vector<ConstraintSpec>& found, ConstraintKind kind, std::string field, std::string source = {},
         std::vector<std::string> choices = {}) {
  found.push_back({kind, std::move(source), std::move(choices), std::move(field)});
}

void response_format(const ojson& rf, std::vector<ConstraintSpec>& found) {
  if (!rf.is_object()) bad("response_format must be an object");
  if (!rf.contains("type") || !rf["type"].is_string()) bad("response_format.type must be one of text, json_object, json_schema");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return;
  if (type == "json_object") return add(found, ConstraintKind::json_object, "response_format");
  if (type != "json_schema")
    bad("response_format.type must be one of text, json_object, json_schema (got \"" + type + "\")");
  if (!present(rf, "json_schema") || !rf["json_schema"].is_object()) bad("response_format.json_schema must be an object");
  const ojson& js = rf["json_schema"];
  if (!js.contains("name") || !js["name"].is_string()) bad("response_format.json_schema.name must be a string");
  if (present(js, "strict") && !js["strict"].is_boolean()) bad("response_format.json_schema.strict must be a boolean");
  if (!present(js, "schema")) bad("response_format.json_schema.schema is required");
  add(found, ConstraintKind::json_schema, "response_format", schema_field(js["schema"], "response_format.json_schema.schema"));
}

void structured_outputs(const ojson& so, std::vector<ConstraintSpec>& found) {
  if (!so.is_object()) bad("structured_outputs must be an object");
  for (auto it = so.begin(); it != so.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    const std::string field = "structured_outputs." + k;
    if (v.is_null()) continue;
    if (k == "json") add(found, ConstraintKind::json_schema, field, schema_field(v, field));
    else if (k == "regex") add(found, ConstraintKind::regex, field, string_field(v, field));
    else if (k == "choice") add(found, ConstraintKind::choice, field, {}, choice_field(v, field));
    else if (k == "grammar") add(found, ConstraintKind::grammar, field, string_field(v, field));
    else if (k == "json_object") {
      if (!v.is_boolean()) bad(field + " must be a boolean");
      if (v.get<bool>()) add(found, ConstraintKind::json_object, field);
    } else if (k == "disable_fallback" || k == "disable_any_whitespace" || k == "disable_additional_properties") {
      if (!v.is_boolean()) bad(field + " must be a boolean");  // options of vLLM's backends: no effect here
    } else {
      bad(field + " is not supported");
    }
  }
}

}  // namespace

const char* constraint_kind_name(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::json_schema: return "json_schema";
    case ConstraintKind::json_object: return "json_object";
    case ConstraintKind::regex: return "regex";
    case ConstraintKind::choice: return "choice";
    case ConstraintKind::grammar: return "grammar";
  }
  return "?";
}

std::optional<ConstraintSpec> parse_request_constraint(const ojson& body) {
  if (!body.is_object()) return std::nullopt;
  std::vector<ConstraintSpec> found;
  if (present(body, "response_format")) response_format(body["response_format"], found);
  if (present(body, "structured_outputs")) structured_outputs(body["structured_outputs"], found);
  if (present(body, "guided_json")) add(found, ConstraintKind::json_schema, "guided_json", schema_field(body["guided_json"], "guided_json"));
  if (present(body, "guided_regex")) add(found, ConstraintKind::regex, "guided_regex", string_field(body["guided_regex"], "guided_regex"));
  if (present(body, "guided_choice")) add(found, ConstraintKind::choice, "guided_choice", {}, choice_field(body["guided_choice"], "guided_choice"));
  if (present(body, "guided_grammar")) add(found, ConstraintKind::grammar, "guided_grammar", string_field(body["guided_grammar"], "guided_grammar"));
  if (present(body, "guided_whitespace_pattern")) bad("guided_whitespace_pattern is not supported (the whitespace policy is fixed)");
  if (found.empty()) return std::nullopt;
  if (found.size() > 1) bad("more than one structured-output constraint: " + found[0].field + " and " + found[1].field);
  return found[0];
}

std::optional<ConstraintSpec> parse_request_constraint(const nlohmann::json& body) {
  return parse_request_constraint(ojson::parse(body.dump()));
}

Grammar grammar_from_constraint(const ConstraintSpec& spec) {
  switch (spec.kind) {
    case ConstraintKind::json_schema: return grammar_from_json_schema_text(spec.source);
    case ConstraintKind::json_object: return grammar_json_object();
    case ConstraintKind::regex: return grammar_from_regex(spec.source);
    case ConstraintKind::choice: return grammar_from_choices(spec.choices);
    case ConstraintKind::grammar: return grammar_from_gbnf(spec.source);
  }
  bad("unknown constraint kind");
}

}  // namespace servelab::grammar
