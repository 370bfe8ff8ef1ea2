// The JSON Schema front end: what each supported keyword allows, awkward schemas, and errors.
#include <gtest/gtest.h>

#include "engine/grammar/grammar_error.h"
#include "engine/grammar/json_schema.h"
#include "tests/grammar/grammar_test_util.h"
#include "analysis/json_schema_check.h"

namespace servelab::grammar {
namespace {

using testing::full_match;

bool ok(std::string_view schema, std::string_view text) { return full_match(grammar_from_json_schema_text(schema), text); }

std::string schema_error(std::string_view schema) {
  try {
    testing::full_match(grammar_from_json_schema_text(schema), "");
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(GrammarJsonSchema, PropertiesInSchemaOrderOptionalOnesSkippable) {
  constexpr const char* s = R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"},
    "c":{"type":"boolean"}},"required":["a"]})";
  EXPECT_TRUE(ok(s, R"({"b":1,"a":"x","c":true})"));
  EXPECT_TRUE(ok(s, R"({"a":"x"})"));
  EXPECT_TRUE(ok(s, R"({"b": 1, "a": "x"})"));  // one optional space after ',' and ':'
  EXPECT_TRUE(ok(s, R"({"a":"x","c":false})"));
  EXPECT_FALSE(ok(s, R"({"a":"x","b":1})"));  // schema order
  EXPECT_FALSE(ok(s, R"({"b":1})"));          // a is required
  EXPECT_FALSE(ok(s, R"({"a":"x","d":1})"));  // additionalProperties absent beside properties: false
  EXPECT_FALSE(ok(s, R"({ "a":"x"})"));       // no other whitespace
  EXPECT_FALSE(ok(s, R"({"a":  "x"})"));
  EXPECT_TRUE(ok(R"({"type":"object","properties":{"a":{},"b":{}}})", "{}"));
  EXPECT_TRUE(ok(R"({"type":"object","properties":{"a":{},"b":{}}})", R"({"b":[1,{"x":null}]})"));
}

TEST(GrammarJsonSchema, AdditionalProperties) {
  constexpr const char* s = R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"],
    "additionalProperties":{"type":"integer"}})";
  EXPECT_TRUE(ok(s, R"({"name":"x","age":3,"zip":7})"));
  EXPECT_FALSE(ok(s, R"({"name":"x","age":"3"})"));
  EXPECT_FALSE(ok(s, R"({"name":"x","name":4})"));  // never a listed key again
  EXPECT_TRUE(ok(R"({"type":"object"})", R"({"any":{"thing":[true]}})"));
  EXPECT_TRUE(ok(R"({"type":"object","additionalProperties":false})", "{}"));
  EXPECT_FALSE(ok(R"({"type":"object","additionalProperties":false})", R"({"a":1})"));
  // Required but not listed: written with the additionalProperties schema.
  EXPECT_TRUE(ok(R"({"type":"object","required":["id"],"additionalProperties":{"type":"string"}})", R"({"id":"7"})"));
}

TEST(GrammarJsonSchema, EnumConstTypesAndUnions) {
  EXPECT_TRUE(ok(R"({"enum":["red",3,null,{"a":[1]}]})", R"({"a":[1]})"));
  EXPECT_TRUE(ok(R"({"enum":["red",3,null]})", "3"));
  EXPECT_FALSE(ok(R"({"enum":["red",3,null]})", "\"blue\""));
  EXPECT_TRUE(ok(R"({"const":"a\"b"})", R"("a\"b")"));
  EXPECT_TRUE(ok(R"({"type":["string","null"]})", "null"));
  EXPECT_TRUE(ok(R"({"anyOf":[{"type":"integer"},{"type":"boolean"}]})", "false"));
  EXPECT_TRUE(ok(R"({"oneOf":[{"type":"integer"},{"type":"array","items":{"type":"null"}}]})", "[null,null]"));
  EXPECT_TRUE(ok(R"({"allOf":[{"type":"integer"}]})", "-12"));
  EXPECT_TRUE(ok(R"(true)", R"({"x":[1,"2"]})"));
  EXPECT_TRUE(ok(R"({"type":"boolean"})", "true"));
  EXPECT_FALSE(ok(R"({"type":"integer"})", "1.0"));
  EXPECT_FALSE(ok(R"({"type":"integer"})", "01"));
  EXPECT_TRUE(ok(R"({"type":"integer"})", "-0"));  // valid JSON, the integer 0
  EXPECT_TRUE(ok(R"({"type":"number"})", "-0.5e+12"));
  EXPECT_FALSE(ok(R"({"type":"number"})", "1e100"));  // at most 2 exponent digits
  EXPECT_FALSE(ok(R"({"type":"number"})", ".5"));
}

TEST(GrammarJsonSchema, Arrays) {
  constexpr const char* s = R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})";
  EXPECT_FALSE(ok(s, "[1]"));
  EXPECT_TRUE(ok(s, "[1,2]"));
  EXPECT_TRUE(ok(s, "[1, 2, 3]"));
  EXPECT_FALSE(ok(s, "[1,2,3,4]"));
  EXPECT_TRUE(ok(R"({"type":"array"})", "[]"));
  EXPECT_TRUE(ok(R"({"type":"array","items":false})", "[]"));
  EXPECT_FALSE(ok(R"({"type":"array","items":false})", "[1]"));
  EXPECT_TRUE(ok(R"({"type":"array","maxItems":0})", "[]"));
}

TEST(GrammarJsonSchema, StringsLengthPatternFormat) {
  constexpr const char* s = R"({"type":"string","minLength":2,"maxLength":3})";
  EXPECT_FALSE(ok(s, "\"a\""));
  EXPECT_TRUE(ok(s, "\"ab\""));
  EXPECT_TRUE(ok(s, "\"中文字\""));  // code points, not bytes
  EXPECT_TRUE(ok(s, "\"\\n\\\"\""));  // an escape is one character
  EXPECT_FALSE(ok(s, "\"abcd\""));
  EXPECT_TRUE(ok(R"({"type":"string"})", R"("a\u00e9\/b")"));
  EXPECT_FALSE(ok(R"({"type":"string"})", R"("\ud800")"));  // lone surrogate escapes
  EXPECT_FALSE(ok(R"({"type":"string"})", "\"a\x01\""));     // raw control characters
  EXPECT_FALSE(ok(R"({"type":"string"})", "\"\xC3(\""));     // broken UTF-8
  EXPECT_TRUE(ok(R"({"type":"string","pattern":"^[A-Z]{2}-\\d+$"})", "\"AB-12\""));
  EXPECT_FALSE(ok(R"({"type":"string","pattern":"^[A-Z]{2}-\\d+$"})", "\"AB-\""));
  EXPECT_TRUE(ok(R"({"type":"string","pattern":"\\d"})", "\"x9y\""));  // unanchored: contains
  EXPECT_TRUE(ok(R"({"format":"date"})", "\"2024-02-29\""));
  EXPECT_FALSE(ok(R"({"format":"date"})", "\"2024-13-01\""));
  EXPECT_TRUE(ok(R"({"type":"string","format":"date-time"})", "\"2024-02-29T23:59:01.5+02:00\""));
  EXPECT_TRUE(ok(R"({"type":"string","format":"uuid"})", "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_TRUE(ok(R"({"type":"string","format":"email"})", "\"a.b+c@mail.example.org\""));
  EXPECT_FALSE(ok(R"({"type":"string","format":"email"})", "\"a@b\""));
  EXPECT_TRUE(ok(R"({"type":"string","format":"uri"})", "\"https://x.org/a?b=1#c\""));
  EXPECT_TRUE(ok(R"({"type":"string","format":"ipv4"})", "\"192.168.0.255\""));
  EXPECT_FALSE(ok(R"({"type":"string","format":"ipv4"})", "\"256.1.1.1\""));
  EXPECT_TRUE(ok(R"({"type":"string","format":"made-up"})", "\"anything\""));  // unknown formats: annotations
}

TEST(GrammarJsonSchema, IntegerRangesAreExact) {
  for (auto [lo, hi] : std::vector<std::pair<int, int>>{{-15, 123}, {0, 9}, {7, 7}, {-100, -3}, {10, 1000}, {-5, 0}}) {
    const std::string s = R"({"type":"integer","minimum":)" + std::to_string(lo) + R"(,"maximum":)" + std::to_string(hi) + "}";
    GrammarMatcher probe(CompiledGrammar::compile(grammar_from_json_schema_text(s), testing::bytes_table()));
    for (int x = -1100; x <= 1100; ++x) {
      const std::string text = std::to_string(x);
      const bool match = probe.accept_bytes(text) && probe.is_accepting();
      probe.rollback(probe.n_steps());
      ASSERT_EQ(match, x >= lo && x <= hi) << s << " on " << x;
    }
  }
  EXPECT_TRUE(ok(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})", "9"));
  EXPECT_FALSE(ok(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})", "10"));
  EXPECT_FALSE(ok(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})", "0"));
  EXPECT_TRUE(ok(R"({"type":"integer","minimum":1.5})", "2"));
  EXPECT_FALSE(ok(R"({"type":"integer","minimum":1.5})", "1"));
  EXPECT_TRUE(ok(R"({"type":"integer","minimum":0})", "123456789"));
}

TEST(GrammarJsonSchema, NumberRangesStayInside) {
  constexpr const char* s = R"({"type":"number","minimum":-5,"maximum":100})";
  for (const char* yes : {"-5", "-4.99", "-0.5", "0", "3.25", "99.999", "100", "100.000", "-5.0"}) EXPECT_TRUE(ok(s, yes)) << yes;
  for (const char* no : {"-5.01", "-6", "100.5", "101", "1e2", "200"}) EXPECT_FALSE(ok(s, no)) << no;
  EXPECT_TRUE(ok(R"({"type":"number","exclusiveMinimum":0})", "1.5"));
  EXPECT_FALSE(ok(R"({"type":"number","exclusiveMinimum":0})", "0.5"));  // tightened to >= 1: valid, not complete
  EXPECT_THROW(ok(R"({"type":"number","minimum":2,"maximum":-2})", "0"), GrammarError);
}

TEST(GrammarJsonSchema, RefsIncludingRecursion) {
  constexpr const char* s = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
    "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})";
  EXPECT_TRUE(ok(s, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(ok(s, R"({"v":1,"kids":[{"kids":[]}]})"));
  EXPECT_TRUE(ok(R"({"definitions":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/a"}}})", R"({"x":"1"})"));
  EXPECT_TRUE(ok(R"({"type":"array","items":{"$ref":"#"},"maxItems":2})", "[[],[[]]]"));
}

TEST(GrammarJsonSchema, ErrorsNameKeywordAndPointer) {
  EXPECT_EQ(schema_error(R"({"type":"object","properties":{"a":{"type":"object","patternProperties":{}}}})"),
            "json_schema: unsupported keyword \"patternProperties\" at /properties/a");
  EXPECT_EQ(schema_error(R"({"if":{}})"), "json_schema: unsupported keyword \"if\" at /");
  EXPECT_EQ(schema_error(R"({"type":"integer","multipleOf":3})"), "json_schema: unsupported keyword \"multipleOf\" at /");
  EXPECT_EQ(schema_error(R"({"allOf":[{},{}]})"), "json_schema: unsupported keyword \"allOf\" (only with one schema) at /");
  EXPECT_EQ(schema_error(R"({"type":"array","uniqueItems":true})"), "json_schema: unsupported keyword \"uniqueItems\" (true) at /");
  EXPECT_EQ(schema_error(R"({"type":"strin"})"), "json_schema: unknown type \"strin\" at /");
  EXPECT_EQ(schema_error(R"({"$ref":"#/$defs/missing"})"), "json_schema: reference \"#/$defs/missing\" does not resolve at /");
  EXPECT_EQ(schema_error(R"({"$ref":"https://x.org/s.json"})"),
            "json_schema: only local references (\"#...\") are supported, not \"https://x.org/s.json\" at /");
  EXPECT_EQ(schema_error(R"({"$ref":"#"})"), "grammar matches no string (rule \"root\")");
  EXPECT_EQ(schema_error(R"({"anyOf":[{"$ref":"#"},{"type":"null"}]})"),
            "left recursion: rule \"ref\" can reach itself without consuming input");
  EXPECT_EQ(schema_error(R"({"properties":{"a":{"enum":[]}}})"), "json_schema: \"enum\" must be a non-empty array at /properties/a");
  EXPECT_EQ(schema_error(R"({"type":"string","pattern":"(a"})"),
            "json_schema: pattern at /: missing ')' at offset 2 of pattern \"(a\"");
  EXPECT_EQ(schema_error(R"({"type":"string","minLength":5,"maxLength":2})"), "json_schema: maxLength < minLength at /");
  EXPECT_EQ(schema_error(R"({"type":"integer","minimum":5,"maximum":2})"), "json_schema: no integer between minimum and maximum at /");
  EXPECT_EQ(schema_error(R"({"type":"object","properties":{"a":false},"required":["a"]})"), "json_schema: schema false matches nothing at /properties/a");
  EXPECT_EQ(schema_error(R"({"type":"object","required":["x"],"additionalProperties":false})"),
            "json_schema: required property \"x\" is not in properties and additionalProperties is false at /");
  EXPECT_EQ(schema_error(R"({"anyOf":[{"type":"string"}],"minLength":2})"),
            "json_schema: keyword \"minLength\" beside \"anyOf\" is not supported at /");
  EXPECT_EQ(schema_error("{\"type\":"), "json_schema: not valid JSON ([json.exception.parse_error.101] parse error at line 1, column 9: syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal)");
  EXPECT_EQ(schema_error(R"({"type":"object","properties":{"n\"q":{}},"additionalProperties":true})"),
            "json_schema: additionalProperties beside a property name with non-ASCII or escaped characters is not supported at /");
}

TEST(GrammarJsonSchema, JsonObjectModeIsAnyObject) {
  const Grammar g = grammar_json_object();
  EXPECT_TRUE(full_match(g, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_TRUE(full_match(g, "{}"));
  EXPECT_FALSE(full_match(g, "[]"));
  EXPECT_FALSE(full_match(g, "\"x\""));
}

}  // namespace
}  // namespace servelab::grammar
