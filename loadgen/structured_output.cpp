#include "loadgen/structured_output.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/splitmix64.h"
#include "loadgen/records/constraint_entry.h"

namespace servelab {
namespace {

/// An entry of a file, checked against the set's kind; "" when it fits, else what is wrong.
std::string structured_entry_problem(const std::string& kind, const nlohmann::ordered_json& v) {
  if (kind == "json_schema") return v.is_object() ? "" : "not a JSON schema object";
  if (kind == "choice") {
    if (!v.is_array() || v.empty()) return "not a non-empty JSON array of choice strings";
    for (const auto& c : v)
      if (!c.is_string()) return "not a non-empty JSON array of choice strings";
    return "";
  }
  if (!v.is_string() || v.get<std::string>().empty())
    return std::string("not a JSON string holding a ") + (kind == "regex" ? "regex" : "GBNF grammar");
  return "";
}

/// Each entry of a file: a JSON array of entries, or JSON lines (one entry a line).
std::vector<std::string> read_schema_file(const std::string& path, const std::string& kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open (workload.structured_output.schemas)");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> out;
  auto add = [&](const nlohmann::ordered_json& v) { out.push_back(constraint_line({kind, v})); };
  const auto whole = nlohmann::ordered_json::parse(text, nullptr, false);
  // A JSON array of entries (for choice: an array of arrays; one array of strings is one line).
  if (!whole.is_discarded() && whole.is_array() && (kind != "choice" || (!whole.empty() && whole[0].is_array()))) {
    for (std::size_t i = 0; i < whole.size(); ++i) {
      const std::string why = structured_entry_problem(kind, whole[i]);
      if (!why.empty()) throw std::runtime_error(path + ": entry " + std::to_string(i) + " is " + why + " (kind " + kind + ")");
      add(whole[i]);
    }
  } else {
    std::istringstream lines(text);
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const auto j = nlohmann::ordered_json::parse(line, nullptr, false);
      const std::string why = j.is_discarded() ? "not JSON" : structured_entry_problem(kind, j);
      if (!why.empty())
        throw std::runtime_error(path + ":" + std::to_string(n) + ": " + why + " (kind " + kind +
                                 "; the file holds a JSON array of entries, or one entry per line)");
      add(j);
    }
  }
  if (out.empty()) throw std::runtime_error(path + ": no entry in the file");
  return out;
}

}  // namespace

SchemaSet load_schema_set(const StructuredOutputSpec& spec) {
  SchemaSet set;
  set.kind = spec.kind;
  if (spec.schemas == "builtin") {
    set.texts = builtin_constraint_lines(spec.kind, spec.n_schemas, kBuiltinSchemaSeed);
    const char* what = spec.kind == "json_schema" ? "schemas" : spec.kind == "regex" ? "regexes"
                       : spec.kind == "choice" ? "choice lists" : "grammars";
    set.source = "builtin (" + std::to_string(set.texts.size()) + " generated " + what + ")";
  } else {
    set.texts = read_schema_file(spec.schemas, spec.kind);
    set.source = spec.schemas;
  }
  return set;
}

int schema_of_request(const StructuredOutputSpec& spec, uint64_t plan_seed, uint64_t id, std::size_t n_schemas) {
  if (!spec.enabled || n_schemas == 0 || spec.fraction <= 0.0) return -1;
  // Its own stream: the constant keeps it apart from the plan's arrival, length and token draws.
  const uint64_t h = splitmix64(splitmix64(plan_seed ^ 0x5c4e3a0f1d2b7968ull) ^ id);
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  if (spec.fraction < 1.0 && u >= spec.fraction) return -1;
  return static_cast<int>(splitmix64(h) % n_schemas);
}

std::string response_format_json(int index, const std::string& schema_text) {
  return "{\"json_schema\":{\"name\":\"schema_" + std::to_string(index) + "\",\"schema\":" + schema_text +
         ",\"strict\":true},\"type\":\"json_schema\"}";
}

std::string structured_field(const StructuredOutputSpec& spec) {
  if (!spec.field.empty()) return spec.field;
  return spec.kind == "json_schema" ? "response_format" : "structured_outputs";
}

StructuredMember structured_member(const StructuredOutputSpec& spec, int index, const std::string& line) {
  const ConstraintEntry e = parse_constraint_line(line);
  const std::string field = structured_field(spec);
  if (e.kind == "json_schema" && field == "response_format") return {"response_format", response_format_json(index, line)};
  // vLLM's names: structured_outputs.{json, regex, choice, grammar}, guided_{json, regex, choice, grammar}.
  const std::string name = e.kind == "json_schema" ? "json" : e.kind;
  if (field == "guided") return {"guided_" + name, e.kind == "json_schema" ? line : e.value.dump()};
  return {"structured_outputs", "{\"" + name + "\":" + (e.kind == "json_schema" ? line : e.value.dump()) + "}"};
}

}  // namespace servelab
