// Structured output through the server's request path: the body's constraint is parsed
// (response_format, structured_outputs, guided_*), compiled against the tokenizer by
// prepare_request, and the engine's draws are masked by it, so the output parses whatever the
// (random) model would have said. Unsupported constructs are 400s naming them.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "analysis/json_schema_check.h"
#include "analysis/structured_stats.h"
#include "engine/backend/make_backend.h"
#include "loadgen/scenario.h"
#include "loadgen/sweep.h"
#include "tests/server/server_test_util.h"
#include "engine/engine.h"
#include "engine/model/tokenizer.h"
#include "server/api_error.h"
#include "server/request_parse.h"
#include "server/request_prepare.h"

namespace servelab::server {
namespace structured_output_test {  // named, not anonymous: a unity batch shares one translation unit

struct Fixture {
  Fixture() {
    BackendSpec spec;
    spec.model = "tiny";
    spec.threads = 1;
    backend_vocab = make_backend(spec)->config().vocab_size;
    EngineConfig c;
    c.sched.kind = BatchingKind::continuous;
    c.kv.max_model_len = 256;
    engine = std::make_unique<Engine>(c, make_backend(spec));
    tokenizer = make_byte_tokenizer(backend_vocab, engine->backend().config().eos_token);
    compiler = std::make_unique<grammar::ConstraintCompiler>(*tokenizer, backend_vocab);
    limits.vocab_size = backend_vocab;
    limits.max_model_len = 256;
    limits.model_name = "tiny";
    limits.constraints = compiler.get();
  }
  /// Runs one request body to the end; returns the generated text.
  std::string generate(const std::string& body, uint64_t id) {
    const CompletionParams p = parse_completion_request(body, ApiKind::completions);
    PreparedRequest r = prepare_request(p, id, *tokenizer, limits);
    EXPECT_TRUE(r.request.constraint != nullptr);
    EXPECT_FALSE(engine->add(r.request, 0.0).has_value());
    std::vector<TokenId> out;
    for (double t = 0; engine->has_work(); t += 1.0)
      for (const FinishedRequest& f : engine->step(t).finished) out = f.outputs.at(0);
    if (!out.empty() && out.back() == engine->backend().config().eos_token) out.pop_back();  // the grammar's end
    return tokenizer->decode(out);
  }
  int backend_vocab = 0;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<grammar::ConstraintCompiler> compiler;
  ModelLimits limits;
};

TEST(StructuredOutput, ChoiceRegexAndJsonSchemaHoldOnARandomModel) {
  Fixture f;
  for (int seed = 0; seed < 4; ++seed) {
    const std::string s = std::to_string(seed);
    const std::string choice = f.generate(
        R"({"prompt":"pick","max_tokens":12,"temperature":1,"seed":)" + s + R"(,"guided_choice":["yes","no","maybe"]})", 10 + seed);
    EXPECT_TRUE(choice == "yes" || choice == "no" || choice == "maybe") << choice;
    const std::string re = f.generate(
        R"({"prompt":"id","max_tokens":12,"temperature":1,"seed":)" + s + R"(,"structured_outputs":{"regex":"[A-Z]{2}-[0-9]{3}"}})",
        20 + seed);
    ASSERT_EQ(re.size(), 6u) << re;
    EXPECT_TRUE(std::isupper(static_cast<unsigned char>(re[0])) && re[2] == '-' && std::isdigit(static_cast<unsigned char>(re[5]))) << re;
    const std::string js = f.generate(
        R"({"prompt":"user","max_tokens":120,"temperature":1,"seed":)" + s +
            R"(,"response_format":{"type":"json_schema","json_schema":{"name":"u","schema":{"type":"object",)"
            R"("properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0,"maximum":120}},)"
            R"("required":["name","age"],"additionalProperties":false}}}})",
        30 + seed);
    const auto j = nlohmann::json::parse(js);  // throws (fails the test) unless it parses
    EXPECT_TRUE(j.at("name").is_string()) << js;
    EXPECT_LE(j.at("age").get<int>(), 120) << js;
    EXPECT_GE(j.at("age").get<int>(), 0) << js;
  }
}

TEST(StructuredOutput, UnsupportedConstructsAndParallelSamplesAre400s) {
  Fixture f;
  auto status_of = [&](const std::string& body) -> std::pair<int, std::string> {
    try {
      prepare_request(parse_completion_request(body, ApiKind::completions), 1, *f.tokenizer, f.limits);
    } catch (const ApiError& e) {
      return {e.status, e.what()};
    }
    return {200, ""};
  };
  auto [s1, m1] = status_of(R"({"prompt":"x","guided_json":{"type":"object","patternProperties":{"a":{}}}})");
  EXPECT_EQ(s1, 400);
  EXPECT_NE(m1.find("patternProperties"), std::string::npos) << m1;
  auto [s2, m2] = status_of(R"({"prompt":"x","guided_regex":"a","guided_choice":["b"]})");
  EXPECT_EQ(s2, 400) << m2;
  auto [s3, m3] = status_of(R"({"prompt":"x","n":2,"guided_choice":["a","b"]})");
  EXPECT_EQ(s3, 400);
  EXPECT_NE(m3.find("n = 1"), std::string::npos) << m3;
  f.limits.constraints = nullptr;
  auto [s4, m4] = status_of(R"({"prompt":"x","guided_choice":["a"]})");
  EXPECT_EQ(s4, 400) << m4;
  EXPECT_EQ(status_of(R"({"prompt":"x","response_format":{"type":"text"}})").first, 200);
}

/// The load generator's structured-output benchmark against our server over loopback (issue 30
/// item 5): half the requests carry a built-in schema as response_format; every constrained
/// output that ended before max_tokens is valid (the grammar guarantees it), the report counts
/// them, and unconstrained requests keep their fixed length.
TEST(StructuredOutput, SchemaSetBenchmarkOverHttpReportsValidity) {
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
  // Short schemas (an enum, a boolean, a small object with enums): whatever the random weights
  // draw, the grammar reaches their end within the 96 tokens (the built-in set's open strings need
  // not), so outputs that ended are certain and each must validate.
  const std::string schema_file = ::testing::TempDir() + "/servelab_so_schemas.jsonl";
  {
    std::ofstream f(schema_file);
    f << R"({"enum": ["red", "green", "blue"]})" << "\n"
      << R"({"type": "boolean"})" << "\n"
      << R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false})" << "\n"
      << R"({"type": "object", "properties": {"size": {"enum": ["s", "m", "l"]}}, "required": ["size"], "additionalProperties": false})" << "\n";
  }
  const std::string yaml = "name: so\nseed: 5\nmodel: {preset: tiny}\n"
                           "strategies:\n  - {label: http, batching: continuous}\n"
                           "workload:\n  rates: [20]\n  n_requests: 8\n  prompt_tokens: 8\n  output_tokens: 96\n"
                           "  structured_output: {schemas: " + schema_file + ", fraction: 0.5}\n"
                           "target: {url: http://127.0.0.1:" + std::to_string(server.port()) + ", timeout_s: 60}\n";
  const Scenario sc = load_scenario_text(yaml, "so.yaml");
  const std::string dir = ::testing::TempDir() + "/servelab_so_http";
  std::filesystem::remove_all(dir);
  SweepOptions opts;
  opts.out_dir = dir;
  const SweepOutcome out = run_sweep(sc, opts);
  ASSERT_EQ(out.records.size(), 8u);
  const std::vector<std::string> schemas = analysis::read_schemas_file(dir + "/schemas.jsonl");
  ASSERT_EQ(schemas.size(), 4u);
  std::size_t n_constrained = 0, n_ended = 0;
  for (const auto& r : out.records) {
    ASSERT_EQ(r.status, RecordStatus::ok) << r.error;
    if (r.schema < 0) {
      EXPECT_EQ(r.output_tokens, 96);
      continue;
    }
    ++n_constrained;
    if (r.output_tokens < 96) {  // it ended: its schema's end, not the length cap
      ++n_ended;
      EXPECT_EQ(analysis::validate_json_text(r.output_text, nlohmann::ordered_json::parse(schemas.at(r.schema))), "")
          << r.output_text;
    }
  }
  EXPECT_GT(n_constrained, 0u);
  EXPECT_LT(n_constrained, 8u);
  EXPECT_GT(n_ended, 0u);  // (eos used to reach the text as byte 0x01: no ended output parsed)
  // The report's figures: every output that ended is among the valid ones.
  const auto st = analysis::structured_stats({out.records[0].run}, out.records, schemas);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->n_constrained, n_constrained);
  EXPECT_GE(st->n_valid, n_ended);
  EXPECT_EQ(st->unconstrained.n, 8u - n_constrained);
}

}  // namespace structured_output_test
}  // namespace servelab::server
