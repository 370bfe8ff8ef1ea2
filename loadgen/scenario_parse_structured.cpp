// `workload.structured_output:` (issue 30: a set of JSON schemas, regexes, choice lists or grammars sent with the requests; see
// loadgen/structured_output.h). Types, ranges and the file are checked here, each error at its
// file:line:col.
#include <filesystem>

#include "loadgen/records/constraint_entry.h"
#include "loadgen/scenario_parse.h"
#include "loadgen/yaml_reader.h"

namespace servelab {
namespace {

using namespace scenario_yaml;

class StructuredWalker : public YamlReader {
 public:
  using YamlReader::YamlReader;

  void walk(const YAML::Node& n) {
    const std::string p = "workload.structured_output";
    if (!section(n, p, {"kind", "field", "schemas", "n_schemas", "fraction"})) return;
    auto& so = s_.workload.structured_output;
    so.enabled = true;
    if (defined(n["kind"]) && read_string(n["kind"], p + ".kind", so.kind) && !is_constraint_kind(so.kind))
      d_.error(p + ".kind", std::string("must be ") + constraint_kinds_text() + " (got " + so.kind + ")");
    if (defined(n["field"]) && read_string(n["field"], p + ".field", so.field)) {
      if (so.field != "response_format" && so.field != "structured_outputs" && so.field != "guided")
        d_.error(p + ".field", "must be response_format, structured_outputs or guided (got " + so.field + ")");
      else if (so.field == "response_format" && so.kind != "json_schema" && is_constraint_kind(so.kind))
        d_.error(p + ".field", "response_format carries JSON schemas only (kind is " + so.kind +
                                   "; use structured_outputs or guided)");
    }
    if (defined(n["schemas"])) {
      std::string raw;
      if (read_string(n["schemas"], p + ".schemas", raw)) {
        if (raw == "builtin") {
          so.schemas = raw;
        } else if (read_path(n["schemas"], p + ".schemas", so.schemas)) {
          std::error_code ec;
          if (!std::filesystem::is_regular_file(so.schemas, ec))
            d_.error(p + ".schemas", "must be builtin or a file of entries of the kind (" + so.schemas + " is not a file)");
        }
      }
    }
    if (defined(n["n_schemas"]) && read_int(n["n_schemas"], p + ".n_schemas", so.n_schemas)) {
      if (so.n_schemas < 1 || so.n_schemas > kMaxBuiltinSchemas)
        d_.error(p + ".n_schemas", "must be in [1, " + std::to_string(kMaxBuiltinSchemas) + "] (got " +
                                       std::to_string(so.n_schemas) + ")");
      else if (so.schemas != "builtin")
        d_.error(p + ".n_schemas", "applies to the builtin set only (the file's schemas are all used)");
    }
    if (defined(n["fraction"]) && read_double(n["fraction"], p + ".fraction", so.fraction) &&
        !(so.fraction >= 0.0 && so.fraction <= 1.0))
      d_.error(p + ".fraction", "must be in [0, 1] (got " + std::to_string(so.fraction) + ")");
  }
};

}  // namespace

void parse_structured_output_section(const YAML::Node& node, const std::vector<AppliedOverride>& overrides,
                                     Scenario& scenario, Diagnostics& diag) {
  StructuredWalker(overrides, scenario, diag).walk(node);
}

}  // namespace servelab
