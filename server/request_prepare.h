#pragma once
// From parsed API fields to an engine Request: the chat template, tokenization, the default
// max_tokens, and the checks that need the model (vocabulary, context length).
#include <functional>
#include <span>
#include <string>

#include "engine/grammar/grammar_constraint.h"
#include "engine/lora/lora_registry.h"
#include "engine/model/tokenizer.h"
#include "engine/request.h"
#include "server/request_parse.h"

namespace servelab::server {

/// Messages -> prompt text with the model's template (render_chat from engine/model/tokenizer.h
/// in `servelab serve`; injected so the server library does not depend on a tokenizer build).
using ChatRenderer = std::function<std::string(std::span<const ChatMessage> messages, const std::string& chat_template)>;

/// What the engine needs to know about the model the server serves.
struct ModelLimits {
  int vocab_size = 0;
  int max_model_len = 0;
  std::string model_name;
  std::string chat_template;
  ChatRenderer render_chat;  ///< empty: chat requests get 400
  /// Compiles structured-output constraints; null: constrained requests get 400.
  grammar::ConstraintCompiler* constraints = nullptr;
  /// Multi-LoRA: a `model` naming one of these runs with that adapter; null: only model_name.
  LoraRegistry* loras = nullptr;
};

struct PreparedRequest {
  Request request;
  std::string prompt_text;  ///< for echo
};

/// `model` empty or the base model's name: the base model; an adapter's name: Request::lora.
/// Throws ApiError: 404 unknown model (neither), 400 an adapter whose folder cannot be read again, 400 bad prompt ids / empty prompt, 400
/// context_length_exceeded (prompt + max_tokens beyond max_model_len), 400 for a structured-output
/// constraint the grammar engine does not support (naming the construct) or with n > 1.
PreparedRequest prepare_request(const CompletionParams& params, uint64_t id, const Tokenizer& tokenizer,
                                const ModelLimits& limits);

}  // namespace servelab::server
