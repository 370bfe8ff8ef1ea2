// Reading the constraint out of OpenAI / vLLM request bodies.
#include <gtest/gtest.h>

#include "engine/grammar/grammar_error.h"
#include "engine/grammar/request_constraint.h"
#include "tests/grammar/grammar_test_util.h"

namespace servelab::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::optional<ConstraintSpec> parse(std::string_view body) { return parse_request_constraint(ojson::parse(body)); }

std::string request_error(std::string_view body) {
  try {
    parse(body);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(GrammarRequestConstraint, OpenAiResponseFormat) {
  EXPECT_FALSE(parse(R"({"model":"m","messages":[]})"));
  EXPECT_FALSE(parse(R"({"response_format":{"type":"text"}})"));
  EXPECT_FALSE(parse(R"({"response_format":null,"guided_json":null})"));
  auto o = parse(R"({"response_format":{"type":"json_object"}})");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->kind, ConstraintKind::json_object);
  EXPECT_EQ(o->field, "response_format");
  auto s = parse(R"({"response_format":{"type":"json_schema","json_schema":{"name":"w","strict":true,
      "schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}}}}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, ConstraintKind::json_schema);
  EXPECT_EQ(s->source, R"({"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}})");  // order kept
  EXPECT_TRUE(testing::full_match(grammar_from_constraint(*s), R"({"z":"q","a":1})"));
}

TEST(GrammarRequestConstraint, VllmFields) {
  auto r = parse(R"({"structured_outputs":{"regex":"[0-9]+","disable_fallback":true}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, ConstraintKind::regex);
  EXPECT_EQ(r->field, "structured_outputs.regex");
  EXPECT_TRUE(testing::full_match(grammar_from_constraint(*r), "123"));
  auto c = parse(R"({"structured_outputs":{"choice":["yes","no"],"json":null}})");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->choices, (std::vector<std::string>{"yes", "no"}));
  auto g = parse(R"({"guided_grammar":"root ::= \"a\"+"})");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->kind, ConstraintKind::grammar);
  EXPECT_TRUE(testing::full_match(grammar_from_constraint(*g), "aaa"));
  auto j = parse(R"({"guided_json":"{\"type\":\"integer\"}"})");  // a schema as JSON text
  ASSERT_TRUE(j);
  EXPECT_EQ(j->source, R"({"type":"integer"})");
  EXPECT_EQ(parse(R"({"guided_choice":["a"]})")->kind, ConstraintKind::choice);
  EXPECT_EQ(parse(R"({"guided_regex":"a"})")->field, "guided_regex");
  EXPECT_EQ(parse(R"({"structured_outputs":{"json":{"type":"null"}}})")->field, "structured_outputs.json");
  EXPECT_EQ(parse(R"({"structured_outputs":{"json_object":true}})")->kind, ConstraintKind::json_object);
  // A plain nlohmann::json body works too (its keys are already sorted).
  EXPECT_EQ(parse_request_constraint(nlohmann::json::parse(R"({"guided_regex":"a"})"))->kind, ConstraintKind::regex);
}

TEST(GrammarRequestConstraint, ErrorsNameTheField) {
  EXPECT_EQ(request_error(R"({"response_format":{"type":"json_object"},"guided_json":{"type":"string"}})"),
            "more than one structured-output constraint: response_format and guided_json");
  EXPECT_EQ(request_error(R"({"structured_outputs":{"regex":"a","choice":["b"]}})"),
            "more than one structured-output constraint: structured_outputs.regex and structured_outputs.choice");
  EXPECT_EQ(request_error(R"({"response_format":{"type":"xml"}})"),
            "response_format.type must be one of text, json_object, json_schema (got \"xml\")");
  EXPECT_EQ(request_error(R"({"response_format":{"type":"json_schema"}})"), "response_format.json_schema must be an object");
  EXPECT_EQ(request_error(R"({"response_format":{"type":"json_schema","json_schema":{"schema":{}}}})"),
            "response_format.json_schema.name must be a string");
  EXPECT_EQ(request_error(R"({"response_format":{"type":"json_schema","json_schema":{"name":"x"}}})"),
            "response_format.json_schema.schema is required");
  EXPECT_EQ(request_error(R"({"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":3}}})"),
            "response_format.json_schema.schema must be a JSON schema object");
  EXPECT_EQ(request_error(R"({"guided_choice":[]})"), "guided_choice must be a non-empty array of strings");
  EXPECT_EQ(request_error(R"({"guided_choice":["a",1]})"), "guided_choice must be a non-empty array of strings");
  EXPECT_EQ(request_error(R"({"guided_regex":""})"), "guided_regex must be a non-empty string");
  EXPECT_EQ(request_error(R"({"guided_json":"{nope"})"), "guided_json is a string but not a JSON schema object");
  EXPECT_EQ(request_error(R"({"structured_outputs":{"structural_tag":"x"}})"), "structured_outputs.structural_tag is not supported");
  EXPECT_EQ(request_error(R"({"structured_outputs":[1]})"), "structured_outputs must be an object");
  EXPECT_EQ(request_error(R"({"guided_whitespace_pattern":" *"})"),
            "guided_whitespace_pattern is not supported (the whitespace policy is fixed)");
  // The front end's errors pass through unchanged.
  auto spec = parse(R"({"guided_json":{"type":"object","not":{}}})");
  try {
    grammar_from_constraint(*spec);
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_STREQ(e.what(), "json_schema: unsupported keyword \"not\" at /");
  }
}

}  // namespace
}  // namespace servelab::grammar
