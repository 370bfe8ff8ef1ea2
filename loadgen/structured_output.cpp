#include "loadgen/structured_output.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/grammar/schema_corpus.h"
#include "engine/splitmix64.h"

namespace servelab {
namespace {

/// Each schema of a file: a JSON array of schema objects, or JSON lines (one object a line).
std::vector<std::string> read_schema_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open (workload.structured_output.schemas)");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> out;
  const auto whole = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!whole.is_discarded() && whole.is_array()) {
    for (std::size_t i = 0; i < whole.size(); ++i) {
      if (!whole[i].is_object())
        throw std::runtime_error(path + ": schema " + std::to_string(i) + " is not a JSON object");
      out.push_back(whole[i].dump());
    }
  } else {
    std::istringstream lines(text);
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const auto j = nlohmann::ordered_json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        throw std::runtime_error(path + ":" + std::to_string(n) +
                                 ": not a JSON schema object (the file holds a JSON array of schemas, or one "
                                 "schema per line)");
      out.push_back(j.dump());
    }
  }
  if (out.empty()) throw std::runtime_error(path + ": no schema in the file");
  return out;
}

}  // namespace

SchemaSet load_schema_set(const StructuredOutputSpec& spec) {
  SchemaSet set;
  if (spec.schemas == "builtin") {
    for (const auto& s : grammar::make_schema_corpus(spec.n_schemas, kBuiltinSchemaSeed)) set.texts.push_back(s.dump());
    set.source = "builtin (" + std::to_string(set.texts.size()) + " generated schemas)";
  } else {
    set.texts = read_schema_file(spec.schemas);
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

}  // namespace servelab
