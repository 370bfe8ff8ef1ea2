#pragma once
// Structured-output load (workload.structured_output): a set of JSON schemas sent with a share of
// the requests, to any server, so a run measures what constrained decoding costs and whether its
// outputs hold. Over HTTP a chosen request carries OpenAI's
//   "response_format": {"type": "json_schema", "json_schema": {"name": "schema_<k>", "schema": ..., "strict": true}}
// (servelab serve, vLLM, SGLang and TGI read it); in-process it carries the same schema compiled
// into a TokenConstraint against the model's tokenizer. A constrained request stops at its
// schema's end (EOS is not ignored; max_tokens still caps it). Its record keeps the schema's index
// and the output text, which the report validates against the schema (analysis/structured_stats.h).
//
//   workload:
//     structured_output:
//       kind: json_schema        # the only kind built
//       schemas: builtin         # or FILE: a JSON array of schemas, or JSON lines (one schema each)
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
  std::string kind = "json_schema";
  std::string schemas = "builtin";  ///< "builtin" or a resolved file path
  int n_schemas = 100;              ///< builtin only
  double fraction = 1.0;
};

/// The largest built-in set (the generator's corpus size that the grammar bench measures).
inline constexpr int kMaxBuiltinSchemas = 1000;

/// The seed of the built-in set: the same 1..1000 schemas in every scenario, so runs compare.
inline constexpr uint64_t kBuiltinSchemaSeed = 2026;

/// A run's schemas; a record's "schema" is an index into `texts`.
struct SchemaSet {
  std::string source;               ///< "builtin (100 generated schemas)" or the file path
  std::vector<std::string> texts;   ///< each schema's JSON text, its key order kept
};

/// The built-in generated set (engine/grammar/schema_corpus.h: objects, enums, arrays, nested
/// objects, formats, patterns, ranges, $defs) or the file's schemas. Throws std::runtime_error
/// ("path[:line]: message") for a missing, malformed or empty file or a schema that is not an object.
SchemaSet load_schema_set(const StructuredOutputSpec& spec);

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

 private:
  StructuredOutputSpec spec_;
  std::shared_ptr<const SchemaSet> set_;
  uint64_t seed_;
};

}  // namespace servelab
