#include "loadgen/http/openai_chunk.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "loadgen/http/fast_json.h"

namespace servelab::http_load {

namespace {

/// key == lit, compared with a length known at compile time (inlined, not a memcmp call).
template <size_t N>
bool is(std::string_view key, const char (&lit)[N]) {
  return key.size() == N - 1 && std::memcmp(key.data(), lit, N - 1) == 0;
}

/// {"message": ...} of an error event, decoded (rare: the slow parser is fine).
std::string error_message(std::string_view data) {
  auto j = nlohmann::json::parse(data.begin(), data.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "error event";
  const auto& e = j["error"];
  if (e.is_object() && e.contains("message") && e["message"].is_string()) {
    std::string m = e["message"].get<std::string>();
    return m.empty() ? "error event" : m;
  }
  return e.dump();
}

bool read_usage(JsonCursor& c, ChunkInfo& out) {
  if (c.peek() != '{') return c.skip();
  c.eat('{');
  if (c.eat('}')) return true;
  do {
    std::string_view key;
    if (!c.string(key) || !c.eat(':')) return false;
    if ((is(key, "prompt_tokens") || is(key, "completion_tokens")) && c.peek() != 'n') {
      int64_t v = -1;
      if (!c.number(&v)) return false;
      if (v >= 0 && v <= INT32_MAX) (is(key, "prompt_tokens") ? out.prompt_tokens : out.completion_tokens) = static_cast<int>(v);
    } else if (!c.skip(2)) {
      return false;
    }
  } while (c.eat(','));
  return c.eat('}');
}

/// One element of "choices".
bool read_choice(JsonCursor& c, ChunkInfo& out, std::string* text) {
  if (c.peek() != '{') return c.skip(2);
  c.eat('{');
  bool has_text = false, role = false;
  size_t n = 0;
  std::optional<std::string_view> finish;
  if (!c.eat('}')) {
    do {
      std::string_view key;
      if (!c.string(key) || !c.eat(':')) return false;
      if (is(key, "text") && c.peek() == '"') {
        std::string_view v;
        if (!c.string(v)) return false;
        has_text = true;
        n += v.size();
        if (text) text->append(v);
      } else if (is(key, "finish_reason") && c.peek() == '"') {
        std::string_view v;
        if (!c.string(v)) return false;
        finish = v;
      } else if (is(key, "delta") && c.peek() == '{') {
        c.eat('{');
        if (!c.eat('}')) {
          do {
            std::string_view dk;
            if (!c.string(dk) || !c.eat(':')) return false;
            if ((is(dk, "content") || is(dk, "reasoning_content")) && c.peek() == '"') {
              std::string_view v;
              if (!c.string(v)) return false;
              has_text = true;
              n += v.size();
              if (text && is(dk, "content")) text->append(v);
            } else {
              if (is(dk, "role")) role = true;
              if (!c.skip(4)) return false;
            }
          } while (c.eat(','));
          if (!c.eat('}')) return false;
        }
      } else if (!c.skip(3)) {
        return false;
      }
    } while (c.eat(','));
    if (!c.eat('}')) return false;
  }
  if (finish) out.finish_reason = std::string(*finish);
  if (!has_text || (role && n == 0)) return true;
  out.text_bytes += n;
  if (n > 0 || !finish) out.token = true;
  return true;
}

}  // namespace

ChunkInfo interpret_chunk(std::string_view data, std::string* text) {
  ChunkInfo out;
  std::string_view d = data;
  while (!d.empty() && (d.back() == ' ' || d.back() == '\r' || d.back() == '\n')) d.remove_suffix(1);
  while (!d.empty() && d.front() == ' ') d.remove_prefix(1);
  if (d == "[DONE]") {
    out.done = true;
    return out;
  }
  JsonCursor c(d);
  bool ok = c.eat('{');
  bool error = false;
  if (ok && !c.eat('}')) {
    do {
      std::string_view key;
      if (!c.string(key) || !c.eat(':')) {
        ok = false;
        break;
      }
      if (is(key, "error") && c.peek() != 'n') {
        error = true;
        ok = c.skip(1);
      } else if (is(key, "usage")) {
        ok = read_usage(c, out);
      } else if (is(key, "choices") && c.peek() == '[') {
        c.eat('[');
        if (!c.eat(']')) {
          do {
            if (!read_choice(c, out, text)) {
              ok = false;
              break;
            }
          } while (c.eat(','));
          ok = ok && c.eat(']');
        }
      } else {
        ok = c.skip(1);
      }
    } while (ok && c.eat(','));
    ok = ok && c.eat('}');
  }
  if (!ok || !c.ok() || !c.at_end()) {
    ChunkInfo bad;
    bad.malformed = true;
    return bad;
  }
  if (error) {
    ChunkInfo e;
    e.error = error_message(d);
    return e;
  }
  return out;
}

std::string decode_json_string_contents(const std::string& raw) {
  const auto j = nlohmann::json::parse("\"" + raw + "\"", nullptr, false);
  if (j.is_string()) return j.get<std::string>();
  return raw;  // a server's broken escape: the bytes as they came
}

}  // namespace servelab::http_load
