#include "server/request_parse.h"

#include <algorithm>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace servelab::server {

using nlohmann::json;

std::string error_body(const ApiError& e) {
  json j;
  j["error"]["message"] = e.what();
  j["error"]["type"] = e.type;
  j["error"]["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  j["error"]["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

/// An integer within [lo, hi], or 400.
int64_t get_int(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
      throw bad_field(field, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " + shown(v) + ")");
    const int64_t x = v.get<int64_t>();
    if (x >= lo && x <= hi) return x;
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(lo) && d <= static_cast<double>(hi))
      return static_cast<int64_t>(d);
  }
  throw bad_field(field, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (got " + shown(v) + ")");
}

double get_number(const json& v, const std::string& field, double lo, double hi, bool lo_open = false) {
  if (v.is_number()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && (lo_open ? d > lo : d >= lo) && d <= hi) return d;
  }
  throw bad_field(field, std::string("must be a number in ") + (lo_open ? "(" : "[") + std::to_string(lo) + ", " +
                             std::to_string(hi) + "] (got " + shown(v) + ")");
}

bool get_bool(const json& v, const std::string& field) {
  if (!v.is_boolean()) throw bad_field(field, "must be true or false (got " + shown(v) + ")");
  return v.get<bool>();
}

std::string get_string(const json& v, const std::string& field) {
  if (!v.is_string()) throw bad_field(field, "must be a string (got " + shown(v) + ")");
  return v.get<std::string>();
}

std::vector<TokenId> get_ids(const json& arr, const std::string& field) {
  std::vector<TokenId> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i)
    ids.push_back(static_cast<TokenId>(get_int(arr[i], field + "[" + std::to_string(i) + "]", 0,
                                               std::numeric_limits<TokenId>::max())));
  return ids;
}

void parse_prompt(const json& p, CompletionParams& out) {
  const std::string f = "prompt";
  if (p.is_string()) {
    out.prompt_text = p.get<std::string>();
  } else if (p.is_array()) {
    if (p.empty()) throw bad_field(f, "must not be empty");
    if (p[0].is_number()) {
      out.prompt_ids = get_ids(p, f);
    } else if (p.size() != 1) {
      throw bad_field(f, "one prompt per request is supported (got a batch of " + std::to_string(p.size()) + ")");
    } else if (p[0].is_string()) {
      out.prompt_text = p[0].get<std::string>();
    } else if (p[0].is_array()) {
      if (p[0].empty()) throw bad_field(f, "must not be empty");
      out.prompt_ids = get_ids(p[0], "prompt[0]");
    } else {
      throw bad_field(f, "must be a string, a list of token ids, or a list of one of those");
    }
  } else {
    throw bad_field(f, "must be a string or a list of token ids (got " + shown(p) + ")");
  }
}

/// Chat content: a string, or OpenAI's list of parts of which the "text" ones are joined.
std::string message_content(const json& c, const std::string& field) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  if (!c.is_array()) throw bad_field(field, "must be a string or a list of content parts (got " + shown(c) + ")");
  std::string text;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string pf = field + "[" + std::to_string(i) + "]";
    const json& part = c[i];
    if (!part.is_object()) throw bad_field(pf, "must be an object {\"type\": \"text\", \"text\": ...}");
    auto t = part.find("type");
    if (t == part.end() || !t->is_string() || *t != "text")
      throw bad_field(pf + ".type", "only \"text\" parts are supported");
    auto x = part.find("text");
    if (x == part.end()) throw bad_field(pf + ".text", "is required", "missing_field");
    text += get_string(*x, pf + ".text");
  }
  return text;
}

void parse_messages(const json& m, CompletionParams& out) {
  if (!m.is_array()) throw bad_field("messages", "must be a list of {role, content} (got " + shown(m) + ")");
  if (m.empty()) throw bad_field("messages", "must not be empty");
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string f = "messages[" + std::to_string(i) + "]";
    if (!m[i].is_object()) throw bad_field(f, "must be an object {role, content}");
    auto r = m[i].find("role");
    if (r == m[i].end()) throw bad_field(f + ".role", "is required", "missing_field");
    ChatMessage msg;
    msg.role = get_string(*r, f + ".role");
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "developer" &&
        msg.role != "tool")
      throw bad_field(f + ".role", "must be system, developer, user, assistant or tool (got \"" + msg.role + "\")");
    auto c = m[i].find("content");
    if (c == m[i].end()) throw bad_field(f + ".content", "is required", "missing_field");
    msg.content = message_content(*c, f + ".content");
    out.messages.push_back(std::move(msg));
  }
}

void parse_stop(const json& s, const ParseLimits& limits, CompletionParams& out) {
  auto add = [&](const json& v, const std::string& f) {
    std::string x = get_string(v, f);
    if (x.empty()) throw bad_field(f, "must not be empty");
    if (x.size() > limits.max_stop_bytes)
      throw bad_field(f, "must be at most " + std::to_string(limits.max_stop_bytes) + " bytes");
    out.stop.push_back(std::move(x));
  };
  if (s.is_null()) return;
  if (s.is_string()) return add(s, "stop");
  if (!s.is_array()) throw bad_field("stop", "must be a string or a list of strings (got " + shown(s) + ")");
  if (static_cast<int>(s.size()) > limits.max_stop)
    throw bad_field("stop", "at most " + std::to_string(limits.max_stop) + " stop strings (got " + std::to_string(s.size()) + ")");
  for (size_t i = 0; i < s.size(); ++i) add(s[i], "stop[" + std::to_string(i) + "]");
}

}  // namespace

CompletionParams parse_completion_request(std::string_view body, ApiKind api, const ParseLimits& limits) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "invalid_request_error", "", "invalid_json", "the request body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "invalid_request_error", "", "invalid_json", "the request body must be a JSON object");

  CompletionParams out;
  out.api = api;
  auto field = [&](const char* name) -> const json* {
    auto it = j.find(name);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = field("model")) out.model = get_string(*v, "model");

  if (api == ApiKind::completions) {
    const json* p = field("prompt");
    if (!p) throw bad_field("prompt", "is required", "missing_field");
    parse_prompt(*p, out);
    if (const json* v = field("echo")) out.echo = get_bool(*v, "echo");
  } else {
    const json* m = field("messages");
    if (!m) throw bad_field("messages", "is required", "missing_field");
    parse_messages(*m, out);
  }

  constexpr int64_t kMaxTokens = 1 << 24;
  if (const json* v = field("max_tokens")) out.max_tokens = static_cast<int>(get_int(*v, "max_tokens", 1, kMaxTokens));
  if (const json* v = field("max_completion_tokens"))
    out.max_tokens = static_cast<int>(get_int(*v, "max_completion_tokens", 1, kMaxTokens));
  if (const json* v = field("temperature")) out.temperature = static_cast<float>(get_number(*v, "temperature", 0.0, 100.0));
  if (const json* v = field("top_p")) out.top_p = static_cast<float>(get_number(*v, "top_p", 0.0, 1.0, /*lo_open=*/true));
  if (const json* v = field("top_k")) {
    const int64_t k = get_int(*v, "top_k", -1, 1 << 24);
    out.top_k = k < 0 ? 0 : static_cast<int>(k);
  }
  if (const json* v = field("seed")) {
    if (v->is_number_unsigned()) out.seed = v->get<uint64_t>();
    else out.seed = static_cast<uint64_t>(get_int(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  }
  if (const json* v = field("n")) out.n = static_cast<int>(get_int(*v, "n", 1, limits.max_n));
  if (const json* v = field("stop")) parse_stop(*v, limits, out);
  if (const json* v = field("ignore_eos")) out.ignore_eos = get_bool(*v, "ignore_eos");
  if (const json* v = field("stream")) out.stream = get_bool(*v, "stream");
  if (const json* v = field("stream_options")) {
    if (!v->is_object()) throw bad_field("stream_options", "must be an object (got " + shown(*v) + ")");
    auto u = v->find("include_usage");
    if (u != v->end() && !u->is_null()) out.include_usage = get_bool(*u, "stream_options.include_usage");
    if (!out.stream) throw bad_field("stream_options", "is only allowed when stream is true");
  }
  // Structured output, read from the body again in its own key order (a schema's properties are
  // generated in the order written); only when the body names a constraint field.
  static const char* const kConstraintFields[] = {"response_format", "structured_outputs", "guided_json", "guided_regex",
                                                  "guided_choice", "guided_grammar"};
  if (std::any_of(std::begin(kConstraintFields), std::end(kConstraintFields), [&](const char* f) { return field(f); })) {
    try {
      out.constraint = grammar::parse_request_constraint(nlohmann::ordered_json::parse(body.begin(), body.end()));
    } catch (const grammar::GrammarError& e) {
      throw ApiError(400, "invalid_request_error", "", "unsupported_constraint", e.what());
    }
  }
  return out;
}

}  // namespace servelab::server
