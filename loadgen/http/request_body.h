#pragma once
// The JSON body the HTTP driver sends for one planned request.
#include <string>

#include "engine/model/tokenizer.h"
#include "engine/request.h"
#include "loadgen/target.h"

namespace servelab::http_load {

/// Prompt text for token ids: the tokenizer's decoding when one is given, else one common
/// English word per id (roughly one token each for BPE vocabularies), seeded by the ids.
std::string prompt_text(const std::vector<TokenId>& ids, const Tokenizer* tokenizer);

/// completions: {"prompt": [ids] (or text with a tokenizer), ...}; chat: {"messages": [{"role":
/// "user", "content": text}], ...}; both with max_tokens, ignore_eos, temperature, top_p, top_k,
/// seed, stream: true, stream_options.include_usage: true, and model: the request's LoRA adapter
/// (Request::lora's name) when it has one, else the target's model when it names one.
/// `response_format` (structured output: response_format_json, loadgen/structured_output.h), when
/// given, goes in as is and the request stops at its end: ignore_eos false.
std::string request_body(const Request& request, const TargetSpec& target, const Tokenizer* tokenizer,
                         const std::string* response_format = nullptr);

}  // namespace servelab::http_load
