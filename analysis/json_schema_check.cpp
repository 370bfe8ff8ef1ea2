// The tests' JSON Schema validator.
#include "analysis/json_schema_check.h"

#include <cmath>
#include <map>
#include <regex>

namespace servelab::analysis {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::wstring to_wide(const std::string& s) {  // UTF-8 -> code points (input is valid UTF-8)
  std::wstring out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len && i + static_cast<size_t>(k) < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
    out += static_cast<wchar_t>(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

bool search(const std::string& pattern, const std::string& text) {
  static std::map<std::string, std::wregex> cache;
  auto it = cache.find(pattern);
  if (it == cache.end()) it = cache.emplace(pattern, std::wregex(to_wide(pattern), std::regex::ECMAScript)).first;
  return std::regex_search(to_wide(text), it->second);
}

bool format_ok(const std::string& f, const std::string& s) {
  static const std::map<std::string, std::string> re = {
      {"date", R"(^\d{4}-\d{2}-\d{2}$)"},
      {"time", R"(^\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$)"},
      {"date-time", R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$)"},
      {"email", R"(^[^@\s]+@[^@\s]+\.[^@\s]+$)"},
      {"uuid", R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)"},
      {"uri", R"(^[a-zA-Z][a-zA-Z0-9+.\-]*:\S+$)"},
      {"ipv4", R"(^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$)"},
      {"hostname", R"(^[a-zA-Z0-9.\-]+$)"},
  };
  auto it = re.find(f);
  if (it == re.end()) return true;
  if (!search(it->second, s)) return false;
  if (f == "date" || f == "date-time") {
    const int month = std::stoi(s.substr(5, 2)), day = std::stoi(s.substr(8, 2));
    if (month < 1 || month > 12 || day < 1 || day > 31) return false;
  }
  if (f == "ipv4") {
    size_t pos = 0;
    for (int k = 0; k < 4; ++k) {
      const size_t dot = s.find('.', pos);
      if (std::stoi(s.substr(pos, dot - pos)) > 255) return false;
      pos = dot + 1;
    }
  }
  return true;
}

size_t n_codepoints(const std::string& s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

bool is_integer(const json& v) {
  if (v.is_number_integer()) return true;
  return v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>());
}

class Validator {
 public:
  explicit Validator(const ojson& root) : root_(root) {}

  std::string check(const json& v, const ojson& s, const std::string& where, int depth = 0) {
    if (depth > 200) return where + ": too deep";
    if (s.is_boolean()) return s.get<bool>() ? "" : where + ": schema false";
    if (s.contains("$ref")) {
      const std::string ptr = s["$ref"].get<std::string>().substr(1);
      return check(v, root_.at(ojson::json_pointer(ptr)), where, depth + 1);
    }
    if (s.contains("const") && json::parse(s["const"].dump()) != v) return where + ": not the const";
    if (s.contains("enum")) {
      bool found = false;
      for (const auto& e : s["enum"]) found = found || json::parse(e.dump()) == v;
      if (!found) return where + ": not in the enum";
    }
    if (s.contains("anyOf")) {
      bool any = false;
      for (const auto& b : s["anyOf"]) any = any || check(v, b, where, depth + 1).empty();
      if (!any) return where + ": no anyOf branch matches";
    }
    if (s.contains("oneOf")) {
      int n = 0;
      for (const auto& b : s["oneOf"]) n += check(v, b, where, depth + 1).empty() ? 1 : 0;
      if (n != 1) return where + ": " + std::to_string(n) + " oneOf branches match";
    }
    if (s.contains("allOf"))
      for (const auto& b : s["allOf"])
        if (auto e = check(v, b, where, depth + 1); !e.empty()) return e;
    if (s.contains("type")) {
      std::vector<std::string> types;
      if (s["type"].is_string()) types.push_back(s["type"]);
      else for (const auto& t : s["type"]) types.push_back(t);
      bool ok = false;
      for (const std::string& t : types) {
        ok = ok || (t == "string" && v.is_string()) || (t == "integer" && is_integer(v)) || (t == "number" && v.is_number()) ||
             (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) || (t == "object" && v.is_object()) ||
             (t == "array" && v.is_array());
      }
      if (!ok) return where + ": wrong type " + std::string(v.type_name());
    }
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      if (s.contains("minLength") && n_codepoints(str) < s["minLength"].get<size_t>()) return where + ": shorter than minLength";
      if (s.contains("maxLength") && n_codepoints(str) > s["maxLength"].get<size_t>()) return where + ": longer than maxLength";
      if (s.contains("pattern") && !search(s["pattern"].get<std::string>(), str)) return where + ": does not match the pattern";
      if (s.contains("format") && !format_ok(s["format"].get<std::string>(), str)) return where + ": not a " + s["format"].get<std::string>();
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      if (s.contains("minimum") && x < s["minimum"].get<double>()) return where + ": below minimum";
      if (s.contains("maximum") && x > s["maximum"].get<double>()) return where + ": above maximum";
      if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number() && x <= s["exclusiveMinimum"].get<double>()) return where + ": not above exclusiveMinimum";
      if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number() && x >= s["exclusiveMaximum"].get<double>()) return where + ": not below exclusiveMaximum";
    }
    if (v.is_object()) {
      if (s.contains("required"))
        for (const auto& r : s["required"])
          if (!v.contains(r.get<std::string>())) return where + ": missing required \"" + r.get<std::string>() + "\"";
      const ojson props = s.value("properties", ojson::object());
      for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string sub = where + "/" + it.key();
        if (props.contains(it.key())) {
          if (auto e = check(*it, props[it.key()], sub, depth + 1); !e.empty()) return e;
        } else if (s.contains("additionalProperties")) {
          if (auto e = check(*it, s["additionalProperties"], sub, depth + 1); !e.empty()) return e;
        }
      }
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return where + ": fewer than minItems";
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return where + ": more than maxItems";
      if (s.contains("items"))
        for (size_t i = 0; i < v.size(); ++i)
          if (auto e = check(v[i], s["items"], where + "/" + std::to_string(i), depth + 1); !e.empty()) return e;
    }
    return "";
  }

 private:
  const ojson& root_;
};

}  // namespace

std::string validate_json_text(std::string_view text, const nlohmann::ordered_json& schema) {
  json v;
  try {
    v = json::parse(text);
  } catch (const json::exception& e) {
    return std::string("not JSON: ") + e.what();
  }
  return Validator(schema).check(v, schema, "");
}

}  // namespace servelab::analysis
