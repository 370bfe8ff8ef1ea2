#pragma once
// Structured output in-process: the same schema assignment as over HTTP (StructuredRequests),
// each chosen request carrying its schema compiled into a TokenConstraint against the model's
// tokenizer (the grammar engine, engine/grammar/), as `servelab serve` does for a response_format.
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/model/tokenizer.h"
#include "engine/runner.h"
#include "loadgen/records/record.h"
#include "loadgen/scenario.h"
#include "loadgen/structured_output.h"

namespace servelab {

/// A run folder's schemas compiled once for one tokenizer and vocabulary, shared by every run of a
/// sweep (the token table is built on first use; each schema on its first request).
class SchemaCompiler {
 public:
  /// `tokenizer` must outlive this. n_vocab: the model's logits row.
  SchemaCompiler(std::shared_ptr<const SchemaSet> set, const Tokenizer& tokenizer, int n_vocab);
  /// A fresh constraint for schema `index`. Throws grammar::GrammarError naming the construct
  /// when the engine does not support the schema (the message says which schema).
  std::shared_ptr<TokenConstraint> constraint(int index);
  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  std::shared_ptr<const SchemaSet> set_;
  const Tokenizer& tokenizer_;
  int n_vocab_;
  std::mutex mu_;
  std::shared_ptr<grammar::TokenTable> table_;
  std::vector<std::shared_ptr<const grammar::CompiledGrammar>> compiled_;
};

/// Wraps a run's source: requests that `structured` picks get their schema's constraint and
/// stop at its end (ignore_eos off); annotate() then gives their records the schema index and the
/// output text (the tokenizer's decoding of what was generated).
class StructuredSource final : public RequestSource {
 public:
  StructuredSource(std::unique_ptr<RequestSource> inner, const StructuredRequests& structured, SchemaCompiler& compiler)
      : inner_(std::move(inner)), structured_(structured), compiler_(compiler) {}
  std::optional<double> next_time() const override { return inner_->next_time(); }
  Request take() override;
  bool exhausted() const override { return inner_->exhausted(); }
  void on_finished(const FinishedRequest& r, double now) override { inner_->on_finished(r, now); }
  std::optional<double> held_until() const override { return inner_->held_until(); }
  bool ready(const Request& r) const override { return inner_->ready(r); }
  std::optional<double> ready_at(const Request& r) const override { return inner_->ready_at(r); }
  void finish(Request& r) override { inner_->finish(r); }

  /// For RecordSinks::annotate: a constrained request's schema and output text.
  void annotate(const FinishedRequest& f, RequestRecord& rec) const;

 private:
  std::unique_ptr<RequestSource> inner_;
  const StructuredRequests& structured_;
  SchemaCompiler& compiler_;
};

/// What a sweep or a capacity probe needs for workload.structured_output: the set, and when the
/// engine runs in-process (no target:), the tokenizer and the compiler of its constraints.
struct StructuredSetup {
  std::shared_ptr<const SchemaSet> schemas;  ///< null: the scenario has no structured_output
  std::unique_ptr<Tokenizer> tokenizer;      ///< in-process only
  std::unique_ptr<SchemaCompiler> compiler;  ///< in-process only; uses *tokenizer
};

/// Loads the scenario's set (throws as load_schema_set) and, in-process, readies its compiler
/// against workload.tokenizer, else the model folder's tokenizer, else bytes (as `servelab serve`
/// without one).
StructuredSetup make_structured_setup(const Scenario& scenario);

}  // namespace servelab
