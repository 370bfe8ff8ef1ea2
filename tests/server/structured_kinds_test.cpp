// The load generator's other structured-output kinds (regex, choice, grammar; issue 30): every
// built-in entry compiles in the grammar engine and its random generations pass the report's
// independent checkers; and a scenario of each kind, sent through structured_outputs or guided_*
// to our own server over loopback, gets outputs that the report counts valid.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "analysis/constraint_check.h"
#include "analysis/structured_stats.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/regex.h"
#include "engine/grammar/token_table.h"
#include "engine/grammar/grammar.h"
#include "loadgen/records/constraint_entry.h"
#include "loadgen/scenario.h"
#include "loadgen/structured_output.h"
#include "loadgen/sweep.h"
#include "tests/server/server_test_util.h"

namespace servelab::server {
namespace structured_kinds_test {  // named, not anonymous: a unity batch shares one translation unit

/// Random bytes under the mask until eos (nine picks in ten end as soon as they can after 40 bytes).
std::string random_output(grammar::GrammarMatcher& m, std::mt19937_64& rng, int eos) {
  std::string out;
  for (int step = 0; step < 400 && !m.is_terminated(); ++step) {
    std::vector<uint32_t> w(static_cast<size_t>(m.n_words()));
    m.fill_next_token_bitmask(w.data());
    std::vector<int> allowed;
    for (int i = 0; i <= eos; ++i)
      if ((w[static_cast<size_t>(i) >> 5] >> (i & 31)) & 1) allowed.push_back(i);
    if (allowed.empty()) break;
    int id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (step > 40 && allowed.back() == eos && rng() % 10 != 0) id = eos;
    EXPECT_TRUE(m.accept_token(id));
    if (id != eos) out += static_cast<char>(id);
  }
  return out;
}

TEST(StructuredKinds, BuiltinEntriesCompileAndTheirOutputsPassTheIndependentCheckers) {
  auto tok = make_byte_tokenizer(257, 256);
  auto table = grammar::TokenTable::build(*tok);
  std::mt19937_64 rng(30);
  for (const char* kind : {"regex", "choice", "grammar"}) {
    int n_checked = 0;
    for (const std::string& line : builtin_constraint_lines(kind, 60, kBuiltinSchemaSeed)) {
      const ConstraintEntry e = parse_constraint_line(line);
      grammar::Grammar g = e.kind == "regex"  ? grammar::grammar_from_regex(e.value.get<std::string>())
                           : e.kind == "choice" ? grammar::grammar_from_choices(e.value.get<std::vector<std::string>>())
                                                : grammar::grammar_from_gbnf(e.value.get<std::string>());
      auto compiled = grammar::CompiledGrammar::compile(g, table);
      for (int k = 0; k < 3; ++k) {
        grammar::GrammarMatcher m(compiled);
        const std::string out = random_output(m, rng, 256);
        if (!m.is_terminated()) continue;  // a deep arithmetic nesting may not end in 400 bytes
        ++n_checked;
        const std::string why = e.kind == "regex"    ? analysis::check_regex_output(out, e.value.get<std::string>())
                                : e.kind == "choice" ? analysis::check_choice_output(out, e.value.get<std::vector<std::string>>())
                                                     : analysis::check_gbnf_output(out, e.value.get<std::string>());
        EXPECT_EQ(why, "") << kind << " " << line << "\noutput: " << out;
      }
    }
    EXPECT_GT(n_checked, 120) << kind;
  }
}

TEST(StructuredKinds, CheckersRejectWhatTheyShould) {
  EXPECT_EQ(analysis::check_regex_output("ab-12", "[a-z]{2}-\\d+"), "");
  EXPECT_NE(analysis::check_regex_output("ab-12x", "[a-z]{2}-\\d+"), "");  // the whole output must match
  EXPECT_NE(analysis::check_regex_output("a\xC3", "a."), "");              // broken UTF-8
  EXPECT_EQ(analysis::check_choice_output("no", {"yes", "no"}), "");
  EXPECT_NE(analysis::check_choice_output("no ", {"yes", "no"}), "");
  const std::string gbnf = "root ::= item (\", \" item)*  # a list\nitem ::= [a-z]+ | \"(\" root \")\"\n";
  EXPECT_EQ(analysis::check_gbnf_output("ab, (c, d), e", gbnf), "");
  EXPECT_NE(analysis::check_gbnf_output("ab, (c, d, e", gbnf), "");
  EXPECT_EQ(analysis::check_gbnf_output("\xC3\xA9", "root ::= [^a]"), "");
  EXPECT_NE(analysis::check_gbnf_output("x", "root ::= [^a-z]{1,2}"), "");
  EXPECT_NE(analysis::check_gbnf_output("x", "root ::= \"x\" undefined"), "");
  EXPECT_EQ(analysis::check_gbnf_output("x12", "root ::= \"x\" [0-9]{1,2}"), "");
  EXPECT_NE(analysis::check_gbnf_output("x123", "root ::= \"x\" [0-9]{1,2}"), "");
}

/// One kind through our server: half the requests constrained; every output that ended before
/// max_tokens must pass the report's checker, and the report counts them.
void run_kind_against_server(const std::string& kind, const std::string& field, const std::string& entries) {
  ServerMetrics metrics("tiny");
  auto engine = std::make_unique<Engine>(test::tiny_engine_config(), test::tiny_backend());
  const auto tokenizer = make_byte_tokenizer(std::max(engine->backend().config().vocab_size, 256),
                                             engine->backend().config().eos_token);
  EngineService service(std::move(engine), metrics, {});
  ServerOptions o;
  o.port = 0;
  o.model_name = "tiny";
  HttpServer server(o, service, *tokenizer, metrics);
  server.start();
  const std::string file = ::testing::TempDir() + "/servelab_so_" + kind + ".jsonl";
  std::ofstream(file) << entries;
  const std::string yaml = "name: so\nseed: 5\nmodel: {preset: tiny}\n"
                           "strategies:\n  - {label: http, batching: continuous}\n"
                           "workload:\n  rates: [20]\n  n_requests: 8\n  prompt_tokens: 8\n  output_tokens: 64\n"
                           "  structured_output: {kind: " + kind + ", field: " + field + ", schemas: " + file +
                           ", fraction: 0.5}\n"
                           "target: {url: http://127.0.0.1:" + std::to_string(server.port()) + ", timeout_s: 60}\n";
  const Scenario sc = load_scenario_text(yaml, "so.yaml");
  const std::string dir = ::testing::TempDir() + "/servelab_so_kind_" + kind;
  std::filesystem::remove_all(dir);
  SweepOptions opts;
  opts.out_dir = dir;
  const SweepOutcome out = run_sweep(sc, opts);
  ASSERT_EQ(out.records.size(), 8u);
  const std::vector<std::string> lines = analysis::read_schemas_file(dir + "/schemas.jsonl");
  std::size_t n_constrained = 0, n_ended = 0;
  for (const auto& r : out.records) {
    ASSERT_EQ(r.status, RecordStatus::ok) << r.error;
    if (r.schema < 0) continue;
    ++n_constrained;
    n_ended += r.output_tokens < 64;
  }
  EXPECT_GT(n_constrained, 0u);
  EXPECT_GT(n_ended, 0u);
  const auto st = analysis::structured_stats({out.records[0].run}, out.records, lines);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->n_constrained, n_constrained);
  EXPECT_EQ(st->n_valid, n_ended) << (st->invalid_reasons.empty() ? "" : st->invalid_reasons[0].first);
}

TEST(StructuredKinds, RegexThroughStructuredOutputs) {
  run_kind_against_server("regex", "structured_outputs", "\"(yes|no)\"\n\"[a-c]{2}-[0-9]\"\n");
}

TEST(StructuredKinds, ChoiceThroughGuided) {
  run_kind_against_server("choice", "guided", "[\"alpha\", \"beta\"]\n[\"é\", \"ü\", \"ñ\"]\n");
}

TEST(StructuredKinds, GrammarThroughGuided) {
  run_kind_against_server("grammar", "guided", "\"root ::= \\\"x\\\" [0-9]{1,2}\"\n\"root ::= (\\\"a\\\" | [^a-z\\\\n\\\"]) \\\".\\\"\"\n");
}

}  // namespace structured_kinds_test
}  // namespace servelab::server
