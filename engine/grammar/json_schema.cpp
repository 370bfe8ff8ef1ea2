// The JSON Schema front end: one rule per object / array schema and per $ref target, terms from
// JsonTerms for everything else.
#include "engine/grammar/json_schema.h"

#include <cmath>
#include <map>
#include <set>

#include "engine/grammar/grammar_error.h"
#include "engine/grammar/json_terms.h"

namespace servelab::grammar {
namespace {

using ojson = nlohmann::ordered_json;

const std::set<std::string>& unsupported_keywords() {
  static const std::set<std::string> s = {
      "patternProperties", "dependencies", "dependentRequired", "dependentSchemas", "if", "then", "else", "not",
      "contains", "minContains", "maxContains", "prefixItems", "additionalItems", "unevaluatedProperties",
      "unevaluatedItems", "propertyNames", "minProperties", "maxProperties", "multipleOf", "$dynamicRef",
      "$recursiveRef"};
  return s;
}

// Keywords that only describe (or hold definitions): allowed beside $ref, anyOf, enum, const.
const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> s = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                          "$defs", "definitions", "deprecated", "readOnly", "writeOnly", "$anchor"};
  return s;
}

std::string at(const std::string& path) { return path.empty() ? "/" : path; }

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const ojson& root) : g_(g), terms_(g), root_(root) {}

  int compile() {
    const int r = g_.declare_rule("root");
    g_.define_rule(r, value(root_, ""));
    g_.set_root(r);
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& path) const {
    throw GrammarError("json_schema: " + what + " at " + at(path));
  }

  void check_keywords(const ojson& s, const std::string& path) const {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (unsupported_keywords().count(k)) fail("unsupported keyword \"" + k + "\"", path);
      if (k == "allOf" && !(it->is_array() && it->size() == 1)) fail("unsupported keyword \"allOf\" (only with one schema)", path);
      if (k == "uniqueItems" && *it == true) fail("unsupported keyword \"uniqueItems\" (true)", path);
      if (k == "items" && it->is_array()) fail("unsupported keyword \"items\" as an array (tuples)", path);
    }
  }

  // Only annotations may stand beside `keyword`.
  void alone(const ojson& s, const std::string& keyword, const std::string& path) const {
    for (auto it = s.begin(); it != s.end(); ++it)
      if (it.key() != keyword && !annotation_keywords().count(it.key()))
        fail("keyword \"" + it.key() + "\" beside \"" + keyword + "\" is not supported", path);
  }

  int value(const ojson& s, const std::string& path) {
    if (++depth_ > GrammarLimits::max_nesting) fail("schema nested deeper than " + std::to_string(GrammarLimits::max_nesting), path);
    const int e = value_inner(s, path);
    --depth_;
    return e;
  }

  int value_inner(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("schema false matches nothing", path);
      return terms_.value();
    }
    if (!s.is_object()) fail("a schema must be an object or a boolean", path);
    check_keywords(s, path);
    if (s.contains("$ref")) {
      alone(s, "$ref", path);
      return ref(s["$ref"], path);
    }
    if (s.contains("const")) return terms_.literal(s["const"]);
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) fail("\"enum\" must be a non-empty array", path);
      std::vector<int> options;
      for (const ojson& v : e) options.push_back(terms_.literal(v));
      return g_.alt(std::move(options));
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      alone(s, k, path);
      const ojson& list = s[k];
      if (!list.is_array() || list.empty()) fail(std::string("\"") + k + "\" must be a non-empty array", path);
      std::vector<int> options;
      for (size_t i = 0; i < list.size(); ++i) options.push_back(value(list[i], path + "/" + k + "/" + std::to_string(i)));
      return g_.alt(std::move(options));
    }
    if (s.contains("allOf")) {
      alone(s, "allOf", path);
      return value(s["allOf"][0], path + "/allOf/0");
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const ojson& x : t) {
          if (!x.is_string()) fail("\"type\" must be a string or an array of strings", path);
          types.push_back(x.get<std::string>());
        }
      } else {
        fail("\"type\" must be a string or an array of strings", path);
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") || s.contains("format")) {
      types = {"string"};
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) {
      types = {"number"};
    } else {
      return terms_.value();
    }
    std::vector<int> options;
    for (const std::string& t : types) options.push_back(typed(t, s, path));
    return g_.alt(std::move(options));
  }

  int typed(const std::string& type, const ojson& s, const std::string& path) {
    if (type == "string") return string(s, path);
    if (type == "integer") return integer(s, path);
    if (type == "number") return number(s, path);
    if (type == "boolean") return g_.alt({g_.literal("true"), g_.literal("false")});
    if (type == "null") return g_.literal("null");
    if (type == "object") return object(s, path);
    if (type == "array") return array(s, path);
    fail("unknown type \"" + type + "\"", path);
  }

  int count(const ojson& s, const char* k, int dflt, const std::string& path) const {
    if (!s.contains(k)) return dflt;
    const ojson& v = s[k];
    if (!v.is_number_integer() && !(v.is_number_float() && v.get<double>() == std::floor(v.get<double>())))
      fail(std::string("\"") + k + "\" must be a non-negative integer", path);
    const double d = v.get<double>();
    if (d < 0) fail(std::string("\"") + k + "\" must be a non-negative integer", path);
    return d > 1e6 ? 1'000'000 : static_cast<int>(d);
  }

  int string(const ojson& s, const std::string& path) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format") && s["format"].is_string()) {
      const int f = terms_.string_format(s["format"].get<std::string>(), at(path));
      if (f >= 0) {
        if (has_len || s.contains("pattern")) fail("\"format\" with minLength, maxLength or pattern is not supported", path);
        return f;
      }
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail("\"pattern\" must be a string", path);
      if (has_len) fail("\"pattern\" with minLength or maxLength is not supported", path);
      return terms_.string_pattern(s["pattern"].get<std::string>(), at(path));
    }
    if (has_len) return terms_.string_length(count(s, "minLength", 0, path), count(s, "maxLength", -1, path), at(path));
    return terms_.string();
  }

  // The bounds as doubles; exclusive ones (a number, or draft 4's boolean) flagged.
  struct Bounds {
    std::optional<double> lo, hi;
    bool lo_excl = false, hi_excl = false;
  };
  Bounds bounds(const ojson& s, const std::string& path) const {
    Bounds b;
    auto num = [&](const char* k) {
      if (!s[k].is_number()) fail(std::string("\"") + k + "\" must be a number", path);
      return s[k].get<double>();
    };
    if (s.contains("minimum")) b.lo = num("minimum");
    if (s.contains("maximum")) b.hi = num("maximum");
    if (s.contains("exclusiveMinimum")) {
      if (s["exclusiveMinimum"].is_boolean()) b.lo_excl = s["exclusiveMinimum"].get<bool>();
      else if (!b.lo || num("exclusiveMinimum") >= *b.lo) b.lo = num("exclusiveMinimum"), b.lo_excl = true;
    }
    if (s.contains("exclusiveMaximum")) {
      if (s["exclusiveMaximum"].is_boolean()) b.hi_excl = s["exclusiveMaximum"].get<bool>();
      else if (!b.hi || num("exclusiveMaximum") <= *b.hi) b.hi = num("exclusiveMaximum"), b.hi_excl = true;
    }
    return b;
  }

  // The integers allowed by the bounds, as integer bounds (clamped to what we write).
  std::pair<std::optional<int64_t>, std::optional<int64_t>> int_bounds(const Bounds& b) const {
    std::optional<int64_t> lo, hi;
    const double big = static_cast<double>(kJsonMaxIntAbs) + 1;
    if (b.lo) {
      double v = std::ceil(*b.lo);
      if (b.lo_excl && v == *b.lo) v += 1;
      lo = static_cast<int64_t>(std::max(-big, std::min(big, v)));
    }
    if (b.hi) {
      double v = std::floor(*b.hi);
      if (b.hi_excl && v == *b.hi) v -= 1;
      hi = static_cast<int64_t>(std::max(-big, std::min(big, v)));
    }
    return {lo, hi};
  }

  int integer(const ojson& s, const std::string& path) {
    const Bounds b = bounds(s, path);
    if (!b.lo && !b.hi) return terms_.integer();
    auto [lo, hi] = int_bounds(b);
    return terms_.integer_range(lo, hi, at(path));
  }

  // Numbers with bounds are written in [ceil(lo), floor(hi)] (exclusive bounds tightened by one):
  // always valid, though not every valid number can be written.
  int number(const ojson& s, const std::string& path) {
    const Bounds b = bounds(s, path);
    if (!b.lo && !b.hi) return terms_.number();
    auto [lo, hi] = int_bounds(b);
    return terms_.number_range(lo, hi, at(path));
  }

  int object(const ojson& s, const std::string& path) {
    struct Prop {
      std::string key;
      int value;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail("\"required\" must be an array of strings", path);
      for (const ojson& r : s["required"]) {
        if (!r.is_string()) fail("\"required\" must be an array of strings", path);
        required.insert(r.get<std::string>());
      }
    }
    const bool has_props = s.contains("properties");
    const ojson extra_schema = s.contains("additionalProperties") ? s["additionalProperties"] : ojson(!has_props);
    if (!extra_schema.is_boolean() && !extra_schema.is_object()) fail("\"additionalProperties\" must be a boolean or a schema", path);
    const bool extra = !(extra_schema.is_boolean() && !extra_schema.get<bool>());
    const int rule = g_.declare_rule("object" + path);
    std::set<std::string> listed;
    if (has_props) {
      const ojson& p = s["properties"];
      if (!p.is_object()) fail("\"properties\" must be an object", path);
      for (auto it = p.begin(); it != p.end(); ++it) {
        listed.insert(it.key());
        props.push_back({it.key(), value(it.value(), path + "/properties/" + escape_pointer(it.key())), required.count(it.key()) > 0});
      }
    }
    for (const std::string& r : required) {  // required but not listed: the additionalProperties schema
      if (listed.count(r)) continue;
      if (!extra) fail("required property \"" + r + "\" is not in properties and additionalProperties is false", path);
      listed.insert(r);
      props.push_back({r, value(extra_schema, path + "/additionalProperties"), true});
    }
    std::vector<int> member(props.size());
    for (size_t i = 0; i < props.size(); ++i)
      member[i] = g_.seq({terms_.literal(ojson(props[i].key)), terms_.colon(), props[i].value});
    int extra_member = -1;
    if (extra) {
      std::vector<std::string> keys(listed.begin(), listed.end());
      extra_member = g_.seq({terms_.key_except(keys, at(path)), terms_.colon(), value(extra_schema, path + "/additionalProperties")});
    }
    // after[i]: the members from i on once one was written; first[i]: before any was written.
    const size_t n = props.size();
    int after = extra ? g_.star(g_.seq({terms_.comma(), extra_member})) : g_.empty();
    int first = extra ? g_.opt(g_.seq({extra_member, g_.star(g_.seq({terms_.comma(), extra_member}))})) : g_.empty();
    for (size_t i = n; i-- > 0;) {
      const int tail = g_.seq({member[i], after});
      first = props[i].required ? tail : g_.alt({tail, first});
      const int sep = g_.seq({terms_.comma(), member[i]});
      after = g_.seq({props[i].required ? sep : g_.opt(sep), after});
    }
    g_.define_rule(rule, g_.seq({g_.byte('{'), first, g_.byte('}')}));
    return g_.call(rule);
  }

  int array(const ojson& s, const std::string& path) {
    const int lo = count(s, "minItems", 0, path);
    int hi = count(s, "maxItems", -1, path);
    if (lo > kJsonMaxStringBound) fail("minItems over " + std::to_string(kJsonMaxStringBound) + " is not supported", path);
    if (hi > kJsonMaxStringBound) hi = kJsonMaxStringBound;  // fewer items: still valid
    if (hi >= 0 && hi < lo) fail("maxItems < minItems", path);
    const int rule = g_.declare_rule("array" + path);
    const ojson items = s.contains("items") ? s["items"] : ojson(true);
    int body;
    if (hi == 0 || (items.is_boolean() && !items.get<bool>())) {
      if (lo > 0) fail("minItems > 0 with no items allowed", path);
      body = g_.empty();
    } else {
      const int item = value(items, path + "/items");
      const int more = g_.repeat(g_.seq({terms_.comma(), item}), std::max(lo - 1, 0), hi < 0 ? -1 : hi - 1);
      body = g_.seq({item, more});
      if (lo == 0) body = g_.opt(body);
    }
    g_.define_rule(rule, g_.seq({g_.byte('['), body, g_.byte(']')}));
    return g_.call(rule);
  }

  int ref(const ojson& r, const std::string& path) {
    if (!r.is_string()) fail("\"$ref\" must be a string", path);
    const std::string target = r.get<std::string>();
    if (target.empty() || target[0] != '#') fail("only local references (\"#...\") are supported, not \"" + target + "\"", path);
    auto it = refs_.find(target);
    if (it != refs_.end()) return g_.call(it->second);
    const std::string pointer = target.substr(1);
    const ojson* node = &root_;
    try {
      node = &root_.at(ojson::json_pointer(pointer));
    } catch (const nlohmann::json::exception&) {
      fail("reference \"" + target + "\" does not resolve", path);
    }
    const int rule = g_.declare_rule("ref" + pointer);
    refs_.emplace(target, rule);
    g_.define_rule(rule, value(*node, pointer));
    return g_.call(rule);
  }

  Grammar& g_;
  JsonTerms terms_;
  const ojson& root_;
  std::map<std::string, int> refs_;
  int depth_ = 0;
};

}  // namespace

Grammar grammar_from_json_schema(const nlohmann::ordered_json& schema) {
  Grammar g;
  SchemaCompiler(g, schema).compile();
  return g;
}

Grammar grammar_from_json_schema_text(std::string_view text) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw GrammarError(std::string("json_schema: not valid JSON (") + e.what() + ")");
  }
  return grammar_from_json_schema(schema);
}

Grammar grammar_json_object() {
  Grammar g;
  JsonTerms terms(g);
  const int r = g.declare_rule("root");
  g.define_rule(r, terms.object());
  g.set_root(r);
  return g;
}

}  // namespace servelab::grammar
