#include "loadgen/records/constraint_entry.h"

#include <stdexcept>

namespace servelab {

const char* constraint_kinds_text() { return "json_schema, regex, choice or grammar"; }

bool is_constraint_kind(const std::string& kind) {
  return kind == "json_schema" || kind == "regex" || kind == "choice" || kind == "grammar";
}

std::string constraint_line(const ConstraintEntry& e) {
  if (e.kind == "json_schema") return e.value.dump();
  nlohmann::ordered_json j;
  j["kind"] = e.kind;
  j[e.kind] = e.value;
  return j.dump();
}

ConstraintEntry parse_constraint_line(const std::string& line) {
  const auto j = nlohmann::ordered_json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::invalid_argument("not a JSON object (a schema or a {\"kind\": ...} entry)");
  // A wrapped entry has exactly the two keys; anything else is a JSON schema.
  if (j.size() == 2 && j.contains("kind") && j["kind"].is_string()) {
    const std::string kind = j["kind"].get<std::string>();
    if (kind != "json_schema" && is_constraint_kind(kind) && j.contains(kind)) {
      const auto& v = j[kind];
      if (kind == "choice") {
        if (!v.is_array() || v.empty()) throw std::invalid_argument("choice must be a non-empty array of strings");
        for (const auto& c : v)
          if (!c.is_string()) throw std::invalid_argument("choice must be a non-empty array of strings");
      } else if (!v.is_string() || v.get<std::string>().empty()) {
        throw std::invalid_argument(kind + " must be a non-empty string");
      }
      return {kind, v};
    }
  }
  return {"json_schema", j};
}

}  // namespace servelab
