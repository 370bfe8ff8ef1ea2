#pragma once
// Structured-output load (workload.structured_output): a set of constraints (JSON schemas, regexes,
// choice lists or GBNF grammars) sent with a share of the requests, to any server, so a run
// measures what constrained decoding costs and whether its outputs hold. Over HTTP a chosen request
// carries, by kind and `field`:
//   json_schema: "response_format": {"type": "json_schema", "json_schema": {"name": "schema_<k>", "schema": ..., "strict": true}}
//                (field response_format, the default), "structured_outputs": {"json": ...} or "guided_json": ...
//   regex:       "structured_outputs": {"regex": "..."} (the default) or "guided_regex": "..."
//   choice:      "structured_outputs": {"choice": [...]} or "guided_choice": [...]
//   grammar:     "structured_outputs": {"grammar": "..."} or "guided_grammar": "..."
// (servelab serve and vLLM read them all; OpenAI, SGLang and TGI read response_format); in-process
// it carries the same constraint compiled into a TokenConstraint against the model's tokenizer. A
// constrained request stops at its constraint's end (EOS is not ignored; max_tokens still caps
// it). Its record keeps the entry's index and the output text, which the report validates against
// the entry (analysis/structured_stats.h).
//
//   workload:
//     structured_output:
//       kind: json_schema        # json_schema | regex | choice | grammar
//       field: response_format   # response_format (json_schema only) | structured_outputs | guided
//       schemas: builtin         # or FILE (see load_schema_set)
//       n_schemas: 100           # builtin: how many of the generated set (1..1000)
//       fraction: 1.0            # share of requests constrained, [0, 1]; < 1 puts both side by side
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace servelab {

/// `workload.structured_output:`.
struct StructuredOutputSpec {
  bool enabled = false;
  std::string kind = "json_schema";  ///< json_schema, regex, choice or grammar
  std::string field;                 ///< response_format, structured_outputs or guided; "" = the kind's default
  std::string schemas = "builtin";  ///< "builtin" or a resolved file path
  int n_schemas = 100;              ///< builtin only
  double fraction = 1.0;
};

/// The largest built-in set (the generator's corpus size that the grammar bench measures).
inline constexpr int kMaxBuiltinSchemas = 1000;

/// The seed of the built-in set: the same 1..1000 schemas in every scenario, so runs compare.
inline constexpr uint64_t kBuiltinSchemaSeed = 2026;

/// A run's constraints; a record's "schema" is an index into `texts`.
struct SchemaSet {
  std::string source;               ///< "builtin (100 generated schemas)" or the file path
  std::string kind = "json_schema";
  /// Each entry as its schemas.jsonl line (loadgen/records/constraint_entry.h): a schema's JSON
  /// text, its key order kept, or {"kind": "regex", "regex": ...} and the like.
  std::vector<std::string> texts;
};

/// The built-in set of `kind`: json_schema is the generated corpus (engine/grammar/schema_corpus.h:
/// objects, enums, arrays, nested objects, formats, patterns, ranges, $defs); regex, choice and
/// grammar are made from templates (loadgen/structured_builtin.cpp). Lines as in SchemaSet::texts.
std::vector<std::string> builtin_constraint_lines(const std::string& kind, int n, uint64_t seed);

/// The built-in set or the file's entries. A file holds a JSON array, or JSON lines (one entry a
/// line), of entries of the spec's kind: schema objects, pattern strings, arrays of choice
/// strings, or GBNF strings. Throws std::runtime_error ("path[:line]: message") for a missing,
/// malformed or empty file or an entry of the wrong type.
SchemaSet load_schema_set(const StructuredOutputSpec& spec);

/// The body member a constrained request carries: its key and its value's compact JSON.
struct StructuredMember {
  std::string key;    ///< "response_format", "structured_outputs", "guided_json", ...
  std::string value;
};

/// The field a spec sends: its `field`, else response_format for json_schema and
/// structured_outputs for the other kinds.
std::string structured_field(const StructuredOutputSpec& spec);

/// The member for entry `index` (its schemas.jsonl line), as the spec's field sends it.
StructuredMember structured_member(const StructuredOutputSpec& spec, int index, const std::string& line);

/// Which schema request `id` of a plan seeded `plan_seed` carries, -1 for none: a draw from
/// (plan_seed, id) below `fraction` constrains it, with schema (another draw) mod n_schemas.
/// Reproducible, and independent of every other stream of the plan.
int schema_of_request(const StructuredOutputSpec& spec, uint64_t plan_seed, uint64_t id, std::size_t n_schemas);

/// The response_format member's value for schema `index` (compact JSON, the schema's text as is).
std::string response_format_json(int index, const std::string& schema_text);

/// One run's assignment: request id -> schema text. Shared by both drivers.
class StructuredRequests {
 public:
  StructuredRequests(StructuredOutputSpec spec, std::shared_ptr<const SchemaSet> set, uint64_t plan_seed)
      : spec_(std::move(spec)), set_(std::move(set)), seed_(plan_seed) {}
  int schema_of(uint64_t id) const { return schema_of_request(spec_, seed_, id, set_->texts.size()); }
  /// The schema text of request `id`, nullptr when it is not constrained.
  const std::string* schema_text(uint64_t id) const {
    const int k = schema_of(id);
    return k < 0 ? nullptr : &set_->texts[static_cast<std::size_t>(k)];
  }
  const SchemaSet& set() const { return *set_; }
  const StructuredOutputSpec& spec() const { return spec_; }

 private:
  StructuredOutputSpec spec_;
  std::shared_ptr<const SchemaSet> set_;
  uint64_t seed_;
};

}  // namespace servelab
