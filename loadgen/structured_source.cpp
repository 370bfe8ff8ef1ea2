#include "loadgen/structured_source.h"

#include "engine/grammar/grammar_constraint.h"
#include "engine/grammar/grammar_error.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/token_table.h"

namespace servelab {

SchemaCompiler::SchemaCompiler(std::shared_ptr<const SchemaSet> set, const Tokenizer& tokenizer, int n_vocab)
    : set_(std::move(set)), tokenizer_(tokenizer), n_vocab_(n_vocab), compiled_(set_->texts.size()) {}

std::shared_ptr<TokenConstraint> SchemaCompiler::constraint(int index) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!table_) table_ = grammar::TokenTable::build(tokenizer_, n_vocab_);
  auto& g = compiled_.at(static_cast<std::size_t>(index));
  if (!g) {
    try {
      g = grammar::CompiledGrammar::compile(grammar::grammar_from_json_schema_text(set_->texts[index]), table_);
    } catch (const grammar::GrammarError& e) {
      throw grammar::GrammarError(set_->source + ": schema " + std::to_string(index) + ": " + e.what());
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

}  // namespace servelab
