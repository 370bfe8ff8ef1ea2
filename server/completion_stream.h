#pragma once
// CompletionStream: turns one request's tokens into OpenAI responses: the SSE chunks of a
// streamed completion or chat completion, or the one JSON body of a non-streamed one. Decodes
// text incrementally (bytes of a UTF-8 character split over tokens are held back), applies stop
// strings (text that could still become a stop string is held back too), counts usage.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/model/tokenizer.h"
#include "server/request_parse.h"

namespace servelab::server {

class CompletionStream {
 public:
  /// `id` is the response id ("cmpl-..."/"chatcmpl-..."), `created` unix seconds.
  CompletionStream(const CompletionParams& params, const Tokenizer& tokenizer, std::string id,
                   std::string model, int64_t created, int n_prompt, std::string prompt_text);

  /// The SSE text to send first (chat: a chunk per choice carrying the assistant role).
  std::string stream_start();
  /// New tokens of some samples. Streaming: returns the SSE events to send. Sets stopped() when
  /// every sample has matched a stop string (the caller then ends the request early).
  std::string on_tokens(const std::vector<std::pair<int, TokenId>>& tokens);
  /// The request ended (reason from the engine) with `last` its final tokens. Streaming: one
  /// last chunk per choice carrying its remaining text and finish_reason (as vLLM sends the last
  /// token), usage if asked, and `data: [DONE]`. Not streaming: the response JSON body.
  std::string on_finished(const std::vector<std::pair<int, TokenId>>& last, const FinishedRequest& f);
  /// Every sample has hit a stop string or ended.
  bool stopped() const;

 private:
  struct Choice {
    std::vector<TokenId> ids;  ///< every generated token
    std::string stable;        ///< decoding of ids[0, n_stable): ends on a whole UTF-8 character
    size_t n_stable = 0;       ///< decoding restarts here, so each token is decoded about once
    std::string text;          ///< decoded text released so far (before any stop string)
    size_t n_sent = 0;         ///< bytes of text already streamed
    int n_tokens = 0;          ///< tokens counted in usage (up to the stop string when one matched)
    bool done = false;
    bool final_sent = false;   ///< streaming: the chunk with finish_reason went out
    std::string finish_reason;
  };
  /// Re-decodes the choice's tokens; releases what is safe; matches stop strings.
  void advance(Choice& c, bool final);
  /// Appends one SSE event (a chunk of choice `index`) to `out`.
  void append_chunk(std::string& out, int index, std::string_view delta, const std::string* finish_reason,
                    bool role = false) const;
  std::string usage_json() const;

  CompletionParams params_;
  const Tokenizer& tok_;
  std::string id_, model_;
  int64_t created_;
  int n_prompt_;
  std::string prompt_text_;
  std::vector<Choice> choices_;
  size_t hold_ = 0;  ///< longest stop string - 1: bytes that could still turn into a stop
  std::string head_;  ///< every event's start: `data: {"id":...,"model":...,"choices":`
  std::string full_;  ///< advance()'s scratch decoding
  std::string raw_;   ///< advance()'s scratch: the raw bytes of the tokens not yet stable
};

/// JSON string literal of `s` (quotes included); invalid UTF-8 becomes U+FFFD.
std::string json_quote(const std::string& s);
/// json_quote(s) appended to `out`.
void append_json_quoted(std::string& out, std::string_view s);

}  // namespace servelab::server
