#include "server/completion_stream.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/model/tokenizer_unicode.h"

namespace servelab::server {

using nlohmann::json;

void append_json_quoted(std::string& out, std::string_view s) {
  // Fast path for plain ASCII without escapes (most deltas).
  bool plain = true;
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') { plain = false; break; }
  if (plain) {
    out += '"';
    out.append(s);
    out += '"';
    return;
  }
  out += json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string json_quote(const std::string& s) {
  std::string out;
  append_json_quoted(out, s);
  return out;
}

namespace {

/// Bytes at the end of `s` that start a UTF-8 character not yet complete.
size_t incomplete_utf8_tail(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return len > back ? back : 0;
  }
  return 0;
}

}  // namespace

CompletionStream::CompletionStream(const CompletionParams& params, const Tokenizer& tokenizer, std::string id,
                                   std::string model, int64_t created, int n_prompt, std::string prompt_text)
    : params_(params), tok_(tokenizer), id_(std::move(id)), model_(std::move(model)), created_(created),
      n_prompt_(n_prompt), prompt_text_(std::move(prompt_text)), choices_(std::max(1, params.n)) {
  for (const auto& s : params_.stop) hold_ = std::max(hold_, s.size() - 1);
  head_ = "data: {\"id\":\"" + id_ + "\",\"object\":\"";
  head_ += params_.api == ApiKind::chat ? "chat.completion.chunk" : "text_completion";
  head_ += "\",\"created\":" + std::to_string(created_) + ",\"model\":";
  append_json_quoted(head_, model_);
  head_ += ",\"choices\":";
  if (params_.echo && params_.api == ApiKind::completions)
    for (auto& c : choices_) c.text = prompt_text_;
}

bool CompletionStream::stopped() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.done; });
}

void CompletionStream::advance(Choice& c, bool final) {
  if (c.done) return;
  const size_t echo_len = params_.echo && params_.api == ApiKind::completions ? prompt_text_.size() : 0;
  // Byte-level decoders concatenate: decode only the tokens after the last whole character. Join
  // their raw bytes first: decode() of ids that end inside a character replaces the partial
  // character by U+FFFD, so a character split over two tokens came out as two U+FFFD.
  std::string& raw = raw_;  // scratch: keeps its capacity across tokens
  raw.clear();
  for (size_t k = c.n_stable; k < c.ids.size(); ++k) raw += tok_.token_bytes(c.ids[k], /*skip_special=*/true);
  const size_t tail = final ? 0 : incomplete_utf8_tail(raw);
  std::string& full = full_;
  full.assign(c.stable);
  full += unicode::to_valid_utf8(std::string_view(raw).substr(0, raw.size() - tail));
  if (tail == 0) {
    c.stable.assign(full);
    c.n_stable = c.ids.size();
  }
  size_t safe = full.size();
  // Stop strings: search only where a match could be new (from the released text's end - hold).
  if (!params_.stop.empty()) {
    const size_t from = c.text.size() > echo_len + hold_ ? c.text.size() - echo_len - hold_ : 0;
    size_t best = std::string::npos;
    for (const auto& s : params_.stop) {
      const size_t p = full.find(s, from);
      if (p != std::string::npos) best = std::min(best, p);
    }
    if (best != std::string::npos) {
      c.text.resize(echo_len);
      c.text.append(full, 0, best);
      c.done = true;
      c.finish_reason = "stop";
      c.n_tokens = static_cast<int>(c.ids.size());
      return;
    }
    if (!final) safe = safe > hold_ ? std::min(safe, full.size() - hold_) : 0;
  }
  safe = std::max(safe, c.text.size() - echo_len);  // never take back what was released
  c.text.resize(echo_len);
  c.text.append(full, 0, safe);
  c.n_tokens = static_cast<int>(c.ids.size());
}

void CompletionStream::append_chunk(std::string& s, int index, std::string_view delta, const std::string* finish_reason,
                                    bool role) const {
  s += head_;
  s += "[{\"index\":";
  s += std::to_string(index);
  s += ',';
  if (params_.api == ApiKind::chat) {
    s += "\"delta\":{";
    if (role) {
      s += "\"role\":\"assistant\",\"content\":\"\"";
    } else if (!delta.empty() || !finish_reason) {
      s += "\"content\":";
      append_json_quoted(s, delta);
    }
    s += "},\"logprobs\":null,\"finish_reason\":";
  } else {
    s += "\"text\":";
    append_json_quoted(s, delta);
    s += ",\"logprobs\":null,\"finish_reason\":";
  }
  if (finish_reason) append_json_quoted(s, *finish_reason);
  else s += "null";
  s += "}]";
  if (params_.include_usage) s += ",\"usage\":null";
  s += "}\n\n";
}

std::string CompletionStream::usage_json() const {
  int n_out = 0;
  for (const auto& c : choices_) n_out += c.n_tokens;
  return "{\"prompt_tokens\":" + std::to_string(n_prompt_) + ",\"completion_tokens\":" + std::to_string(n_out) +
         ",\"total_tokens\":" + std::to_string(n_prompt_ + n_out) + "}";
}

std::string CompletionStream::stream_start() {
  std::string s;
  if (params_.api == ApiKind::chat)
    for (size_t i = 0; i < choices_.size(); ++i) append_chunk(s, static_cast<int>(i), "", nullptr, true);
  else if (params_.echo)
    for (size_t i = 0; i < choices_.size(); ++i) {
      append_chunk(s, static_cast<int>(i), prompt_text_, nullptr);
      choices_[i].n_sent = prompt_text_.size();
    }
  return s;
}

std::string CompletionStream::on_tokens(const std::vector<std::pair<int, TokenId>>& tokens) {
  // One chunk per token (a session may take several steps' tokens at once), so clients can
  // timestamp every token.
  std::string out;
  for (const auto& [i, t] : tokens) {
    if (i < 0 || static_cast<size_t>(i) >= choices_.size() || choices_[i].done) continue;
    Choice& c = choices_[i];
    c.ids.push_back(t);
    advance(c, false);
    if (!params_.stream) continue;
    const std::string_view delta = std::string_view(c.text).substr(std::min(c.n_sent, c.text.size()));
    append_chunk(out, i, delta, c.done ? &c.finish_reason : nullptr);
    c.n_sent = c.text.size();
    c.final_sent = c.done;
  }
  return out;
}

std::string CompletionStream::on_finished(const std::vector<std::pair<int, TokenId>>& last, const FinishedRequest& f) {
  // Every token but each choice's final one gets its own chunk; the final one rides with finish_reason.
  std::vector<int> last_index(choices_.size(), -1);
  for (size_t k = 0; k < last.size(); ++k)
    if (last[k].first >= 0 && static_cast<size_t>(last[k].first) < choices_.size()) last_index[last[k].first] = static_cast<int>(k);
  std::vector<std::pair<int, TokenId>> before;
  for (size_t k = 0; k < last.size(); ++k)
    if (last[k].first >= 0 && static_cast<size_t>(last[k].first) < choices_.size() &&
        last_index[last[k].first] != static_cast<int>(k))
      before.push_back(last[k]);
  std::string head = on_tokens(before);
  for (size_t i = 0; i < choices_.size(); ++i)
    if (last_index[i] >= 0 && !choices_[i].done) choices_[i].ids.push_back(last[last_index[i]].second);
  const char* reason = f.reason == FinishReason::eos ? "stop" : f.reason == FinishReason::length ? "length" : "abort";
  for (auto& c : choices_) {
    if (c.done) continue;
    advance(c, true);
    if (!c.done) c.finish_reason = reason;
  }
  if (params_.stream) {
    std::string out = std::move(head);
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      if (c.final_sent) continue;  // its stop chunk went out with its tokens
      const std::string_view delta = std::string_view(c.text).substr(std::min(c.n_sent, c.text.size()));
      append_chunk(out, static_cast<int>(i), delta, &c.finish_reason);
      c.n_sent = c.text.size();
      c.final_sent = true;
    }
    if (params_.include_usage) {
      out += head_;
      out += "[],\"usage\":";
      out += usage_json();
      out += "}\n\n";
    }
    out += "data: [DONE]\n\n";
    return out;
  }
  json j;
  j["id"] = id_;
  j["object"] = params_.api == ApiKind::chat ? "chat.completion" : "text_completion";
  j["created"] = created_;
  j["model"] = model_;
  j["choices"] = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    json c;
    c["index"] = i;
    if (params_.api == ApiKind::chat) c["message"] = {{"role", "assistant"}, {"content", choices_[i].text}};
    else c["text"] = choices_[i].text;
    c["logprobs"] = nullptr;
    c["finish_reason"] = choices_[i].finish_reason;
    j["choices"].push_back(std::move(c));
  }
  j["usage"] = json::parse(usage_json());
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace servelab::server
