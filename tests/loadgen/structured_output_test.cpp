// workload.structured_output: the key's errors at file:line, the built-in schema set, which
// requests carry a schema, the request body over HTTP (a real socket) and the record it leaves;
// in-process, the schema compiled into the request's constraint.
#include "loadgen/structured_output.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "loadgen/capacity_probe.h"
#include "loadgen/http/http_driver.h"
#include "loadgen/plan.h"
#include "loadgen/http/request_body.h"
#include "loadgen/records/constraint_entry.h"
#include "loadgen/sources.h"
#include "loadgen/sweep.h"
#include "tests/loadgen/http_test_util.h"
#include "tests/loadgen/loadgen_test_util.h"

namespace servelab {
namespace structured_output_test {  // named, not anonymous: a unity batch shares one translation unit

using testing_util::kBaseScenario;
using testing_util::load_yaml;
using testing_util::scenario_errors;
using testing_util::write_temp;

bool has_error(const std::vector<std::string>& errors, const std::string& what) {
  for (const auto& e : errors)
    if (e.find(what) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += e + "\n";
  return s;
}

TEST(StructuredOutput, ScenarioKeyAndItsErrors) {
  const Scenario s = load_yaml(std::string(kBaseScenario) +
                               "  structured_output: {schemas: builtin, n_schemas: 120, fraction: 0.5}\n");
  EXPECT_TRUE(s.workload.structured_output.enabled);
  EXPECT_EQ(s.workload.structured_output.n_schemas, 120);
  EXPECT_DOUBLE_EQ(s.workload.structured_output.fraction, 0.5);
  EXPECT_FALSE(load_yaml(kBaseScenario).workload.structured_output.enabled);

  auto errs = scenario_errors(std::string(kBaseScenario) + "  structured_output: {fraction: 1.5, kind: regex}\n");
  EXPECT_TRUE(has_error(errs, ":9:")) << joined(errs);  // at the line of the key
  EXPECT_TRUE(has_error(errs, "workload.structured_output.fraction must be in [0, 1] (got 1.5")) << joined(errs);
  errs = scenario_errors(std::string(kBaseScenario) + "  structured_output: {kind: xml}\n");
  EXPECT_TRUE(has_error(errs, "workload.structured_output.kind must be json_schema, regex, choice or grammar (got xml)"))
      << joined(errs);
  errs = scenario_errors(std::string(kBaseScenario) + "  structured_output: {kind: regex, field: response_format}\n");
  EXPECT_TRUE(has_error(errs, ":9:")) << joined(errs);
  EXPECT_TRUE(has_error(errs, "field response_format carries JSON schemas only (kind is regex")) << joined(errs);
  errs = scenario_errors(std::string(kBaseScenario) + "  structured_output: {kind: choice, field: extra_body}\n");
  EXPECT_TRUE(has_error(errs, "must be response_format, structured_outputs or guided (got extra_body)")) << joined(errs);
  const Scenario g = load_yaml(std::string(kBaseScenario) + "  structured_output: {kind: grammar, field: guided}\n");
  EXPECT_EQ(g.workload.structured_output.kind, "grammar");
  EXPECT_EQ(g.workload.structured_output.field, "guided");
  errs = scenario_errors(std::string(kBaseScenario) + "  structured_output: {schemas: no-such-file.json}\n");
  EXPECT_TRUE(has_error(errs, "is not a file")) << joined(errs);
  errs = scenario_errors(std::string(kBaseScenario) + "  structured_output: {n_schemas: 0, schema: x}\n");
  EXPECT_TRUE(has_error(errs, "n_schemas must be in [1, 1000] (got 0)")) << joined(errs);
  EXPECT_TRUE(has_error(errs, "unknown key 'schema'")) << joined(errs);
}

TEST(StructuredOutput, BuiltinSetIsRealisticAndFilesAreRead) {
  StructuredOutputSpec spec;
  spec.enabled = true;
  const SchemaSet set = load_schema_set(spec);
  ASSERT_EQ(set.texts.size(), 100u);
  int n_enum = 0, n_array = 0, n_nested = 0;
  for (const auto& t : set.texts) {
    const auto j = nlohmann::ordered_json::parse(t);
    EXPECT_TRUE(j.is_object());
    n_enum += t.find("\"enum\"") != std::string::npos;
    n_array += t.find("\"array\"") != std::string::npos;
    n_nested += t.find("\"properties\"") != t.rfind("\"properties\"");  // properties within properties
  }
  EXPECT_GT(n_enum, 10);
  EXPECT_GT(n_array, 10);
  EXPECT_GT(n_nested, 10);
  EXPECT_EQ(load_schema_set(spec).texts, set.texts);  // the same set in every scenario

  spec.schemas = write_temp("schemas.jsonl", "{\"type\":\"object\",\"properties\":{\"b\":{},\"a\":{}}}\n\n{\"enum\":[1,2]}\n");
  const SchemaSet file = load_schema_set(spec);
  ASSERT_EQ(file.texts.size(), 2u);
  EXPECT_EQ(file.texts[0], R"({"type":"object","properties":{"b":{},"a":{}}})");  // key order kept
  spec.schemas = write_temp("bad.jsonl", "{\"type\":\"object\"}\n[1]\n");
  try {
    load_schema_set(spec);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2: not a JSON schema object"), std::string::npos) << e.what();
  }
}

TEST(StructuredOutput, BuiltinSetsOfEveryKindAndTheirFiles) {
  for (const char* kind : {"regex", "choice", "grammar"}) {
    StructuredOutputSpec spec;
    spec.enabled = true;
    spec.kind = kind;
    spec.n_schemas = 40;
    const SchemaSet set = load_schema_set(spec);
    ASSERT_EQ(set.texts.size(), 40u);
    EXPECT_EQ(set.kind, kind);
    std::set<std::string> distinct(set.texts.begin(), set.texts.end());
    EXPECT_GT(distinct.size(), 10u) << kind;  // templates with seeded sizes, not one entry
    for (const auto& t : set.texts) EXPECT_EQ(parse_constraint_line(t).kind, kind) << t;
    EXPECT_EQ(load_schema_set(spec).texts, set.texts);  // the same set in every scenario
  }
  StructuredOutputSpec spec;
  spec.enabled = true;
  spec.kind = "choice";
  spec.schemas = write_temp("choices.jsonl", "[\"yes\", \"no\"]\n[\"a\", \"b\", \"c\"]\n");
  SchemaSet set = load_schema_set(spec);
  ASSERT_EQ(set.texts.size(), 2u);
  EXPECT_EQ(set.texts[1], R"({"kind":"choice","choice":["a","b","c"]})");
  spec.kind = "regex";
  spec.schemas = write_temp("regexes.json", R"(["[a-z]+", "\\d{3}"])");
  set = load_schema_set(spec);
  ASSERT_EQ(set.texts.size(), 2u);
  EXPECT_EQ(parse_constraint_line(set.texts[1]).value, "\\d{3}");
  spec.schemas = write_temp("bad_regexes.jsonl", "\"[a-z]+\"\n{\"type\": \"string\"}\n");
  try {
    load_schema_set(spec);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad_regexes.jsonl:2: not a JSON string holding a regex"), std::string::npos) << e.what();
  }
}

TEST(StructuredOutput, EachKindAndFieldSendsItsMember) {
  StructuredOutputSpec spec;
  spec.enabled = true;
  const std::string schema = R"({"type":"object","properties":{"b":{},"a":{}}})";
  EXPECT_EQ(structured_member(spec, 3, schema).key, "response_format");
  spec.field = "structured_outputs";
  EXPECT_EQ(structured_member(spec, 3, schema).value, "{\"json\":" + schema + "}");  // key order kept
  spec.field = "guided";
  EXPECT_EQ(structured_member(spec, 3, schema).key, "guided_json");
  const std::string regex = constraint_line({"regex", "[a-z]{2}"});
  const std::string choice = constraint_line({"choice", {"x", "y"}});
  const std::string gbnf = constraint_line({"grammar", "root ::= \"a\""});
  spec.field = "";
  spec.kind = "regex";
  EXPECT_EQ(structured_member(spec, 0, regex).key, "structured_outputs");
  EXPECT_EQ(structured_member(spec, 0, regex).value, R"({"regex":"[a-z]{2}"})");
  spec.kind = "choice";
  EXPECT_EQ(structured_member(spec, 0, choice).value, R"({"choice":["x","y"]})");
  spec.field = "guided";
  spec.kind = "grammar";
  EXPECT_EQ(structured_member(spec, 0, gbnf).key, "guided_grammar");
  EXPECT_EQ(structured_member(spec, 0, gbnf).value, R"("root ::= \"a\"")");
  // In the body at its sorted place (the body stays what nlohmann would dump), ignore_eos off.
  Request r;
  r.id = 1;
  r.prompt = {1, 2, 3};
  r.sampling.max_tokens = 8;
  r.sampling.ignore_eos = true;
  TargetSpec t;
  for (const auto& m : {structured_member(spec, 0, gbnf), StructuredMember{"structured_outputs", R"({"regex":"a+"})"},
                        StructuredMember{"response_format", response_format_json(0, R"({"type":"string"})")}}) {
    const std::string body = http_load::request_body(r, t, nullptr, &m);
    const auto j = nlohmann::json::parse(body);
    EXPECT_EQ(j.dump(), body);
    EXPECT_TRUE(j.contains(m.key)) << body;
    EXPECT_EQ(j["ignore_eos"], false);
  }
}

TEST(StructuredOutput, TheKindsExampleScenarioLoads) {
  const Scenario s = load_scenario(std::string(SERVELAB_SOURCE_DIR) + "/scenarios/http/structured-kinds.yaml");
  EXPECT_EQ(s.workload.structured_output.kind, "regex");
  EXPECT_EQ(structured_field(s.workload.structured_output), "structured_outputs");
}

TEST(StructuredOutput, FractionPicksReproducibleRequests) {
  StructuredOutputSpec spec;
  spec.enabled = true;
  spec.fraction = 0.3;
  int n = 0;
  std::vector<int> seen(7, 0);
  for (uint64_t id = 0; id < 4000; ++id) {
    const int k = schema_of_request(spec, 42, id, 7);
    EXPECT_EQ(k, schema_of_request(spec, 42, id, 7));
    if (k >= 0) ++n, ++seen[k];
  }
  EXPECT_NEAR(n / 4000.0, 0.3, 0.03);
  for (int c : seen) EXPECT_GT(c, 100);  // every schema used
  spec.fraction = 1.0;
  EXPECT_GE(schema_of_request(spec, 42, 5, 7), 0);
  spec.fraction = 0.0;
  EXPECT_EQ(schema_of_request(spec, 42, 5, 7), -1);
}

TEST(StructuredOutput, HttpBodyCarriesResponseFormatAndRecordKeepsText) {
  using namespace http_load::test;
  std::vector<std::string> bodies;
  ScriptedServer srv([&](tcp::socket& s, const std::string& req) {
    bodies.push_back(req.substr(req.find("\r\n\r\n") + 4));
    // A chat stream whose JSON output arrives in pieces, escapes included.
    auto delta = [](const std::string& c) {
      return "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + c + "\"},\"finish_reason\":null}]}\n\n";
    };
    write_all(s, sse_response(delta("{\\\"name\\\": ") + delta("\\\"a\\\\u00e9\\\"}") +
                              "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
                              "data: [DONE]\n\n"));
  });
  StructuredOutputSpec spec;
  spec.enabled = true;
  spec.fraction = 1.0;
  auto set = std::make_shared<SchemaSet>();
  set->texts = {R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]})"};
  const StructuredRequests structured(spec, set, 7);
  OpenLoopSource source(burst_plan(1));
  http_load::HttpDriverOptions o;
  o.target.urls = {srv.url()};
  o.target.api = TargetApi::chat;
  o.structured = &structured;
  std::vector<RequestRecord> recs;
  RecordSinks sinks;
  sinks.on_record = [&](const RequestRecord& r) { recs.push_back(r); };
  http_load::drive_http(source, o, "so", sinks);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].status, RecordStatus::ok) << recs[0].error;
  EXPECT_EQ(recs[0].schema, 0);
  EXPECT_EQ(recs[0].output_text, "{\"name\": \"a\\u00e9\"}");  // JSON string escapes decoded once
  ASSERT_EQ(bodies.size(), 1u);
  const auto body = nlohmann::ordered_json::parse(bodies[0]);
  EXPECT_EQ(body["response_format"]["type"], "json_schema");
  EXPECT_EQ(body["response_format"]["json_schema"]["name"], "schema_0");
  EXPECT_EQ(body["response_format"]["json_schema"]["schema"].dump(), set->texts[0]);
  EXPECT_EQ(body["response_format"]["json_schema"]["strict"], true);
  EXPECT_EQ(body["ignore_eos"], false);  // it stops where the schema ends
  // The record line keeps both, and reads back.
  const RequestRecord back = nlohmann::json::parse(record_line(recs[0])).get<RequestRecord>();
  EXPECT_EQ(back.schema, 0);
  EXPECT_EQ(back.output_text, recs[0].output_text);
  // Unconstrained requests' records do not change: no schema, no text.
  RequestRecord plain = recs[0];
  plain.schema = -1;
  EXPECT_EQ(record_line(plain).find("output_text"), std::string::npos);
}

TEST(StructuredOutput, InProcessRunConstrainsAndRecordsOutputs) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "servelab_so_inprocess";
  std::filesystem::remove_all(dir);
  const Scenario s = load_yaml(
      "name: so\nseed: 3\nmodel: {preset: tiny}\nbackend: {kind: cpu, threads: 1}\n"
      "strategies:\n  - batching: continuous\n"
      "workload:\n  rates: [200]\n  n_requests: 4\n  prompt_tokens: 4\n  output_tokens: 24\n"
      "  structured_output: {n_schemas: 2, fraction: 0.5}\n");
  SweepOptions o;
  o.out_dir = dir.string();
  const SweepOutcome out = run_sweep(s, o);
  ASSERT_EQ(out.records.size(), 4u);
  int n_constrained = 0;
  for (const auto& r : out.records) {
    ASSERT_EQ(r.status, RecordStatus::ok) << r.error;
    if (r.schema < 0) {
      EXPECT_EQ(r.output_tokens, 24);  // unconstrained: the fixed length (ignore_eos)
      continue;
    }
    ++n_constrained;
    EXPECT_LT(r.schema, 2);
    ASSERT_FALSE(r.output_text.empty());
    // The grammar, not the random weights, chose the bytes: a JSON value starts the text.
    EXPECT_NE(std::string("{[\"-0123456789tfn").find(r.output_text.front()), std::string::npos) << r.output_text;
  }
  EXPECT_GT(n_constrained, 0);
  EXPECT_LT(n_constrained, 4);
  std::ifstream schemas(o.out_dir + "/schemas.jsonl");
  std::string line;
  int n_lines = 0;
  while (std::getline(schemas, line)) n_lines += !line.empty();
  EXPECT_EQ(n_lines, 2);
}

// `servelab capacity` probes run the workload `run` does: with structured_output, the same
// requests carry the same constraints (here in-process, a regex set) and their records the
// entry and the output text.
TEST(StructuredOutput, CapacityProbesCarryTheConstraints) {
  const Scenario s = load_yaml(
      "name: so\nseed: 3\nmodel: {preset: tiny}\nbackend: {kind: cpu, threads: 1}\n"
      "strategies:\n  - batching: continuous\n"
      "workload:\n  rates: [200]\n  n_requests: 6\n  prompt_tokens: 4\n  output_tokens: 48\n"
      "  structured_output: {kind: choice, n_schemas: 3, fraction: 0.5}\n");
  const PointRunner runner(s);
  const PointRun run = runner.run(0, 200.0);
  ASSERT_EQ(run.records.size(), 6u);
  const SchemaSet set = load_schema_set(s.workload.structured_output);
  const StructuredRequests picks(s.workload.structured_output, std::make_shared<SchemaSet>(set), Planner(s).make(200.0).seed);
  int n_constrained = 0;
  for (const auto& r : run.records) {
    EXPECT_EQ(r.schema, picks.schema_of(r.id));  // the assignment `run` makes
    if (r.schema < 0) continue;
    ++n_constrained;
    const auto choices = parse_constraint_line(set.texts.at(static_cast<size_t>(r.schema))).value;
    EXPECT_NE(std::find(choices.begin(), choices.end(), r.output_text), choices.end()) << r.output_text;
  }
  EXPECT_GT(n_constrained, 0);
  EXPECT_LT(n_constrained, 6);
}

}  // namespace structured_output_test
}  // namespace servelab
