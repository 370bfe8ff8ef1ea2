#pragma once
// The request bodies of POST /v1/completions and /v1/chat/completions, parsed and checked
// field by field. Pure: no engine, no tokenizer, no sockets (the libFuzzer harness drives it).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/request.h"

#include "engine/grammar/grammar_error.h"
#include "engine/grammar/request_constraint.h"

namespace servelab::server {

enum class ApiKind { completions, chat };

/// Bounds the parser enforces (anything beyond is a 400 naming the field).
struct ParseLimits {
  int max_n = 16;              ///< parallel samples per request
  int max_stop = 16;           ///< stop strings
  size_t max_stop_bytes = 256; ///< bytes per stop string
};

/// One parsed request. Exactly one prompt form is set: prompt_text, prompt_ids (completions),
/// or messages (chat).
struct CompletionParams {
  ApiKind api = ApiKind::completions;
  std::string model;
  std::optional<std::string> prompt_text;
  std::optional<std::vector<TokenId>> prompt_ids;
  std::vector<ChatMessage> messages;
  std::optional<int> max_tokens;   ///< unset: completions 16 (OpenAI's default), chat: the rest of the context
  float temperature = 1.0f;        ///< OpenAI's default; 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;                   ///< 0 or -1 in the body = off
  std::optional<uint64_t> seed;
  int n = 1;
  std::vector<std::string> stop;
  bool ignore_eos = false;         ///< vLLM's extension: generate exactly max_tokens
  bool stream = false;
  bool include_usage = false;      ///< stream_options.include_usage: a last chunk with usage
  bool echo = false;               ///< completions: prepend the prompt text to the output
  /// Structured output: response_format, structured_outputs or guided_* (one at most).
  std::optional<grammar::ConstraintSpec> constraint;
};

/// Parses a JSON body. Throws ApiError (400) naming the field: "max_tokens: must be an integer
/// >= 1 (got -3)". Unknown fields are ignored, as OpenAI clients send many.
CompletionParams parse_completion_request(std::string_view body, ApiKind api, const ParseLimits& limits = {});

}  // namespace servelab::server
