// The schema corpus generator.
#include "engine/grammar/schema_corpus.h"

#include <algorithm>
#include <random>
#include <string>

namespace servelab::grammar {
namespace {

using ojson = nlohmann::ordered_json;

const std::vector<std::string> kNames = {
    "id", "name", "email", "created_at", "updated_at", "status", "type", "price", "quantity", "description", "tags",
    "user", "address", "city", "country", "zip", "phone", "url", "enabled", "count", "version", "metadata", "config",
    "timeout", "retries", "title", "author", "score", "rating", "level", "category", "currency", "amount", "notes",
    "query", "limit", "offset", "location", "unit", "language", "priority", "due_date", "owner", "items", "sku",
    "first_name", "last_name", "age", "active", "role", "region", "start_time", "end_time", "duration", "path"};
const std::vector<std::string> kWords = {"low", "medium", "high", "open", "closed", "pending", "celsius", "fahrenheit",
                                         "USD", "EUR", "GBP", "admin", "user", "guest", "draft", "published", "red",
                                         "green", "blue", "north", "south", "daily", "weekly", "en", "fr", "de"};
const std::vector<std::string> kPatterns = {R"(^[A-Z]{2,3}-[0-9]{3,6}$)", R"(^[a-z0-9_]{3,16}$)", R"(^\+?[0-9]{7,15}$)",
                                            R"(^#[0-9a-fA-F]{6}$)", R"(^v[0-9]+\.[0-9]+\.[0-9]+$)",
                                            R"(^[A-Z][a-z]+( [A-Z][a-z]+)*$)", R"(^[0-9]{5}(-[0-9]{4})?$)",
                                            R"(^(GET|POST|PUT|DELETE)$)", R"(^\d{3}-\d{2}-\d{4}$)", R"([A-Z][a-z]+)"};
const std::vector<std::string> kFormats = {"date", "time", "date-time", "email", "uuid", "uri", "ipv4", "hostname"};

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  const T& any(const std::vector<T>& v) { return v[static_cast<size_t>(pick(static_cast<int>(v.size())))]; }

  ojson scalar() {
    switch (pick(12)) {
      case 0: return {{"type", "string"}};
      case 1: return {{"type", "string"}, {"maxLength", any(std::vector<int>{8, 16, 32, 64})}, {"minLength", pick(2)}};
      case 2: return {{"type", "string"}, {"format", any(kFormats)}};
      case 3: return {{"type", "string"}, {"pattern", any(kPatterns)}};
      case 4: {
        ojson e = ojson::array();
        const int n = 2 + pick(4);
        for (int i = 0; i < n; ++i) e.push_back(kWords[static_cast<size_t>((pick(100) + i * 7) % static_cast<int>(kWords.size()))]);
        std::vector<std::string> uniq;
        ojson out = ojson::array();
        for (const auto& w : e)
          if (std::find(uniq.begin(), uniq.end(), w.get<std::string>()) == uniq.end()) uniq.push_back(w), out.push_back(w);
        return {{"type", "string"}, {"enum", out}};
      }
      case 5: return {{"type", "integer"}};
      case 6: {
        const int lo = any(std::vector<int>{-100, -1, 0, 1, 18});
        return {{"type", "integer"}, {"minimum", lo}, {"maximum", lo + any(std::vector<int>{9, 100, 999, 65535})}};
      }
      case 7: return {{"type", "number"}};
      case 8: return {{"type", "number"}, {"minimum", 0}, {"maximum", any(std::vector<int>{1, 5, 100, 1000})}};
      case 9: return {{"type", "boolean"}};
      case 10: return {{"type", ojson::array({"string", "null"})}};
      default: return {{"type", "integer"}, {"minimum", 0}};
    }
  }

  ojson object(int depth, int max_props) {
    ojson props = ojson::object();
    ojson required = ojson::array();
    const int n = 1 + pick(max_props);
    for (int i = 0; i < n; ++i) {
      std::string key = any(kNames);
      if (props.contains(key)) key += "_" + std::to_string(i);
      props[key] = value(depth + 1);
      if (chance(0.3)) props[key]["description"] = "The " + key + ".";
      if (chance(0.6)) required.push_back(key);
    }
    ojson o = {{"type", "object"}, {"properties", props}};
    if (!required.empty()) o["required"] = required;
    const int ap = pick(10);
    if (ap < 6) o["additionalProperties"] = false;
    else if (ap == 6) o["additionalProperties"] = true;
    else if (ap == 7) o["additionalProperties"] = ojson{{"type", "string"}};
    return o;
  }

  ojson value(int depth) {
    const int k = pick(10);
    if (depth < 3 && k == 0) return object(depth, 4);
    if (depth < 3 && k == 1) {
      ojson a = {{"type", "array"}, {"items", chance(0.5) ? scalar() : object(depth + 1, 3)}};
      if (chance(0.5)) a["maxItems"] = 1 + pick(5);
      if (chance(0.3)) a["minItems"] = 1;
      return a;
    }
    if (k == 2 && chance(0.5)) return {{"anyOf", ojson::array({scalar(), ojson{{"type", "null"}}})}};
    if (k == 3 && chance(0.3)) return {{"const", any(kWords)}};
    return scalar();
  }

  ojson schema(int i) {
    switch (i % 6) {
      case 0:  // API payload
        return object(0, 10);
      case 1: {  // tool-call arguments
        ojson o = object(1, 6);
        o["additionalProperties"] = false;
        return {{"$schema", "https://json-schema.org/draft/2020-12/schema"}, {"title", "tool_" + std::to_string(i)},
                {"type", "object"}, {"properties", o["properties"]}, {"required", o.value("required", ojson::array())},
                {"additionalProperties", false}};
      }
      case 2: {  // config: nested objects of scalars
        ojson o = object(1, 5);
        o["properties"]["settings"] = object(2, 6);
        return o;
      }
      case 3: {  // $defs + $ref
        ojson item = object(2, 4);
        return {{"$defs", {{"item", item}}},
                {"type", "object"},
                {"properties", {{"items", {{"type", "array"}, {"items", {{"$ref", "#/$defs/item"}}}, {"maxItems", 4}}},
                                {"primary", {{"$ref", "#/$defs/item"}}}}},
                {"required", ojson::array({"items"})},
                {"additionalProperties", false}};
      }
      case 4: {  // recursive tree
        return {{"definitions",
                 {{"node",
                   {{"type", "object"},
                    {"properties", {{"label", scalar()}, {"children", {{"type", "array"}, {"items", {{"$ref", "#/definitions/node"}}}, {"maxItems", 3}}}}},
                    {"required", ojson::array({"label"})},
                    {"additionalProperties", false}}}}},
                {"$ref", "#/definitions/node"}};
      }
      default: {  // oneOf of object shapes, top-level array
        if (chance(0.5)) return {{"type", "array"}, {"items", object(1, 4)}, {"maxItems", 5}};
        ojson a = object(1, 3), b = object(1, 3);
        a["properties"]["kind"] = {{"const", "a"}};
        b["properties"]["kind"] = {{"const", "b"}};
        a["required"].push_back("kind");
        b["required"].push_back("kind");
        a["additionalProperties"] = false;
        b["additionalProperties"] = false;
        return {{"oneOf", ojson::array({a, b})}};
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

std::vector<nlohmann::ordered_json> make_schema_corpus(int n, uint64_t seed) {
  Gen gen(seed);
  std::vector<nlohmann::ordered_json> out;
  for (int i = 0; i < n; ++i) out.push_back(gen.schema(i));
  return out;
}

}  // namespace servelab::grammar
