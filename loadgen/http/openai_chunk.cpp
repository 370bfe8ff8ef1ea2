#include "loadgen/http/openai_chunk.h"

#include <nlohmann/json.hpp>

namespace servelab::http_load {

using nlohmann::json;

ChunkInfo interpret_chunk(std::string_view data) {
  ChunkInfo out;
  std::string_view d = data;
  while (!d.empty() && (d.back() == ' ' || d.back() == '\r' || d.back() == '\n')) d.remove_suffix(1);
  if (d == "[DONE]") {
    out.done = true;
    return out;
  }
  json j = json::parse(d.begin(), d.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    out.malformed = true;
    return out;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    if (e->is_object() && e->contains("message") && (*e)["message"].is_string()) out.error = (*e)["message"].get<std::string>();
    else out.error = e->dump();
    if (out.error.empty()) out.error = "error event";
    return out;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer()) out.prompt_tokens = p->get<int>();
    if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer())
      out.completion_tokens = c->get<int>();
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) return out;
  for (const json& c : *choices) {
    if (!c.is_object()) continue;
    std::optional<std::string> fr;
    if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) fr = f->get<std::string>();
    if (fr) out.finish_reason = fr;
    const json* text = nullptr;
    bool role_only = false;
    if (auto t = c.find("text"); t != c.end() && t->is_string()) text = &*t;
    if (auto dl = c.find("delta"); dl != c.end() && dl->is_object()) {
      if (auto t = dl->find("content"); t != dl->end() && t->is_string()) text = &*t;
      else if (auto r = dl->find("reasoning_content"); r != dl->end() && r->is_string()) text = &*r;
      role_only = dl->contains("role");
    }
    if (!text) continue;
    const size_t n = text->get_ref<const std::string&>().size();
    if (role_only && n == 0) continue;
    out.text_bytes += n;
    if (n > 0 || !fr) out.token = true;
  }
  return out;
}

}  // namespace servelab::http_load
