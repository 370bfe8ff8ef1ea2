#pragma once
// The JSON body the HTTP driver sends for one planned request.
#include <string>

#include "engine/model/tokenizer.h"
#include "engine/request.h"
#include "loadgen/structured_output.h"
#include "loadgen/target.h"

namespace servelab::http_load {

/// Prompt text for token ids: the tokenizer's decoding when one is given, else one common
/// English word per id (roughly one token each for BPE vocabularies), seeded by the ids.
std::string prompt_text(const std::vector<TokenId>& ids, const Tokenizer* tokenizer);

/// completions: {"prompt": [ids] (or text with a tokenizer), ...}; chat: {"messages": [{"role":
/// "user", "content": text}], ...}; both with max_tokens, ignore_eos, temperature, top_p, top_k,
/// seed, stream: true, stream_options.include_usage: true, and model: the request's LoRA adapter
/// (Request::lora's name) when it has one, else the target's model when it names one.
/// `structured` (the constraint's member, loadgen/structured_output.h: response_format,
/// structured_outputs or guided_*), when given, goes in as is, at its key's sorted place, and the
/// request stops at its end: ignore_eos false.
std::string request_body(const Request& request, const TargetSpec& target, const Tokenizer* tokenizer,
                         const StructuredMember* structured = nullptr);

}  // namespace servelab::http_load
