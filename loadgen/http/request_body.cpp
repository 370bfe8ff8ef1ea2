#include "loadgen/http/request_body.h"

#include <nlohmann/json.hpp>

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

std::string request_body(const Request& r, const TargetSpec& t, const Tokenizer* tokenizer) {
  nlohmann::json j;
  if (!t.model.empty()) j["model"] = t.model;
  if (t.api == TargetApi::chat) {
    j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt_text(r.prompt, tokenizer)}}});
  } else if (tokenizer) {
    j["prompt"] = prompt_text(r.prompt, tokenizer);
  } else {
    j["prompt"] = r.prompt;
  }
  const SamplingParams& sp = r.sampling;
  j["max_tokens"] = sp.max_tokens;
  j["ignore_eos"] = sp.ignore_eos;
  j["temperature"] = sp.temperature;
  if (sp.top_p < 1.0f) j["top_p"] = sp.top_p;
  if (sp.top_k > 0) j["top_k"] = sp.top_k;
  j["seed"] = sp.seed & 0x7fffffffffffffffull;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace servelab::http_load
