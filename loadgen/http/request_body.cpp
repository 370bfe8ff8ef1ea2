#include "loadgen/http/request_body.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "engine/lora/lora_adapter.h"

namespace servelab::http_load {

namespace {
const char* const kWords[64] = {
    "the", "of", "and", "to", "in", "is", "for", "that", "with", "on", "as", "was", "by", "at", "from", "it",
    "an", "be", "this", "which", "or", "are", "not", "but", "have", "had", "one", "all", "their", "there", "were",
    "been", "has", "when", "who", "will", "more", "no", "if", "out", "so", "said", "what", "up", "its", "about",
    "into", "than", "them", "can", "only", "other", "new", "some", "could", "time", "these", "two", "may", "then",
    "do", "first", "any", "my"};
}  // namespace

std::string prompt_text(const std::vector<TokenId>& ids, const Tokenizer* tokenizer) {
  if (tokenizer) return tokenizer->decode(ids);
  std::string s;
  s.reserve(ids.size() * 5);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += kWords[static_cast<uint32_t>(ids[i]) % 64];
  }
  return s;
}

namespace {

/// `s` as a JSON string the way nlohmann's dump(-1, ' ', false, replace) writes it.
void append_string(std::string& out, const std::string& s) {
  bool plain = true;
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') {
      plain = false;
      break;
    }
  if (!plain) {
    out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

/// A float stored in nlohmann::json (as a double) and dumped: its shortest round-trip digits.
void append_float(std::string& out, float v) {
  const double d = v;
  if (!std::isfinite(d)) {
    out += "null";
    return;
  }
  char buf[64];
  out.append(buf, nlohmann::detail::to_chars(buf, buf + sizeof buf, d));
}

}  // namespace

std::string request_body(const Request& r, const TargetSpec& t, const Tokenizer* tokenizer,
                         const StructuredMember* structured) {
  // Written directly, one per request at thousands a second: the bytes nlohmann::json would dump
  // for the same fields (keys in its sorted order), without building the object.
  const SamplingParams& sp = r.sampling;
  std::string s;
  s.reserve(160 + 8 * r.prompt.size() + (structured ? structured->value.size() + 24 : 0));
  // The structured member at its key's place in sorted order: guided_* first, response_format
  // after prompt, structured_outputs after stream_options.
  const auto member_here = [&](bool here) {
    if (!here) return;
    s += '"';
    s += structured->key;
    s += "\":";
    s += structured->value;
    s += ',';
  };
  s += '{';
  member_here(structured && structured->key.rfind("guided_", 0) == 0);
  s += "\"ignore_eos\":";
  s += sp.ignore_eos && t.ignore_eos && !structured ? "true" : "false";
  s += ",\"max_tokens\":" + std::to_string(sp.max_tokens);
  if (t.api == TargetApi::chat) {
    s += ",\"messages\":[{\"content\":";
    append_string(s, prompt_text(r.prompt, tokenizer));
    s += ",\"role\":\"user\"}]";
  }
  const std::string& model = r.lora ? r.lora->name : t.model;  // a LoRA workload names the adapter
  if (!model.empty()) {
    s += ",\"model\":";
    append_string(s, model);
  }
  if (t.api != TargetApi::chat) {
    s += ",\"prompt\":";
    if (tokenizer) {
      append_string(s, prompt_text(r.prompt, tokenizer));
    } else {
      s += '[';
      for (size_t i = 0; i < r.prompt.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(r.prompt[i]);
      }
      s += ']';
    }
  }
  if (structured && structured->key == "response_format") {
    s += ",\"response_format\":";
    s += structured->value;
  }
  s += ",\"seed\":" + std::to_string(sp.seed & 0x7fffffffffffffffull);
  s += ",\"stream\":true,\"stream_options\":{\"include_usage\":true},";
  member_here(structured && structured->key == "structured_outputs");
  s += "\"temperature\":";
  append_float(s, sp.temperature);
  if (sp.top_k > 0) s += ",\"top_k\":" + std::to_string(sp.top_k);
  if (sp.top_p < 1.0f) {
    s += ",\"top_p\":";
    append_float(s, sp.top_p);
  }
  s += '}';
  if (!t.extra_body.empty()) {  // --extra-body: the user's fields over ours (rare: parsed per request)
    nlohmann::json j = nlohmann::json::parse(s);
    j.merge_patch(nlohmann::json::parse(t.extra_body));
    return j.dump();
  }
  return s;
}

}  // namespace servelab::http_load
