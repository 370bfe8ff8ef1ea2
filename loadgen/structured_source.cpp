#include "loadgen/structured_source.h"

#include <algorithm>

#include "engine/backend/make_backend.h"
#include "engine/grammar/grammar_constraint.h"
#include "engine/grammar/grammar_error.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/request_constraint.h"
#include "engine/grammar/token_table.h"
#include "loadgen/records/constraint_entry.h"

namespace servelab {

namespace {

/// A schemas.jsonl line as the grammar engine's request constraint.
grammar::ConstraintSpec structured_constraint_spec(const std::string& line) {
  const ConstraintEntry e = parse_constraint_line(line);
  grammar::ConstraintSpec spec;
  if (e.kind == "json_schema") {
    spec.kind = grammar::ConstraintKind::json_schema;
    spec.source = line;
  } else if (e.kind == "choice") {
    spec.kind = grammar::ConstraintKind::choice;
    for (const auto& c : e.value) spec.choices.push_back(c.get<std::string>());
  } else {
    spec.kind = e.kind == "regex" ? grammar::ConstraintKind::regex : grammar::ConstraintKind::grammar;
    spec.source = e.value.get<std::string>();
  }
  return spec;
}

}  // namespace

SchemaCompiler::SchemaCompiler(std::shared_ptr<const SchemaSet> set, const Tokenizer& tokenizer, int n_vocab)
    : set_(std::move(set)), tokenizer_(tokenizer), n_vocab_(n_vocab), compiled_(set_->texts.size()) {}

std::shared_ptr<TokenConstraint> SchemaCompiler::constraint(int index) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!table_) table_ = grammar::TokenTable::build(tokenizer_, n_vocab_);
  auto& g = compiled_.at(static_cast<std::size_t>(index));
  if (!g) {
    try {
      g = grammar::CompiledGrammar::compile(grammar::grammar_from_constraint(structured_constraint_spec(set_->texts[index])), table_);
    } catch (const grammar::GrammarError& e) {
      throw grammar::GrammarError(set_->source + ": entry " + std::to_string(index) + ": " + e.what());
    }
  }
  return std::make_shared<grammar::GrammarConstraint>(g);
}

Request StructuredSource::take() {
  Request r = inner_->take();
  const int k = structured_.schema_of(r.id);
  if (k >= 0) {
    r.constraint = compiler_.constraint(k);
    r.sampling.ignore_eos = false;  // the output ends where its schema does
    r.sampling.n = 1;
  }
  return r;
}

void StructuredSource::annotate(const FinishedRequest& f, RequestRecord& rec) const {
  const int k = structured_.schema_of(f.request_id);
  if (k < 0) return;
  rec.schema = k;
  if (f.outputs.empty()) return;
  // eos (and eos drawn again under ignore_eos after the end) is special: no text.
  rec.output_text = compiler_.tokenizer().decode(f.outputs.front(), /*skip_special=*/true);
}

StructuredSetup make_structured_setup(const Scenario& scenario) {
  StructuredSetup out;
  const StructuredOutputSpec& so = scenario.workload.structured_output;
  if (!so.enabled) return out;
  out.schemas = std::make_shared<const SchemaSet>(load_schema_set(so));
  if (scenario.target) return out;  // a server compiles them
  const ModelConfig model = resolve_model_config(scenario.model.path.empty() ? scenario.model.preset : scenario.model.path);
  if (!scenario.workload.tokenizer.empty()) out.tokenizer = load_bpe_tokenizer(scenario.workload.tokenizer);
  else if (!scenario.model.path.empty()) out.tokenizer = load_tokenizer_from_dir(scenario.model.path);
  if (!out.tokenizer) {
    std::optional<TokenId> eos;
    if (model.eos_token >= 0) eos = model.eos_token;
    out.tokenizer = make_byte_tokenizer(std::max(model.vocab_size, 256), eos);
  }
  out.compiler = std::make_unique<SchemaCompiler>(out.schemas, *out.tokenizer, model.vocab_size);
  return out;
}

}  // namespace servelab
