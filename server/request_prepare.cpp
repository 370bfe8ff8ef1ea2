#include "server/request_prepare.h"

#include "server/api_error.h"

namespace servelab::server {

PreparedRequest prepare_request(const CompletionParams& p, uint64_t id, const Tokenizer& tok, const ModelLimits& lim) {
  PreparedRequest out;
  Request& r = out.request;
  r.id = id;
  if (!p.model.empty() && p.model != lim.model_name) {
    try {
      if (lim.loras) r.lora = lim.loras->get(p.model);
    } catch (const std::exception& e) {  // it left host memory and its folder no longer reads
      throw ApiError(400, "invalid_request_error", "model", "invalid_lora_adapter", e.what());
    }
    if (!r.lora)
      throw ApiError(404, "invalid_request_error", "model", "model_not_found",
                     "The model `" + p.model + "` does not exist (this server serves `" + lim.model_name + "`" +
                         (lim.loras ? " and its LoRA adapters" : "") + ")");
  }
  if (p.prompt_ids) {
    r.prompt = *p.prompt_ids;
    for (size_t i = 0; i < r.prompt.size(); ++i)
      if (r.prompt[i] >= lim.vocab_size)
        throw bad_field("prompt[" + std::to_string(i) + "]", "token id " + std::to_string(r.prompt[i]) +
                                                                 " is outside the vocabulary [0, " +
                                                                 std::to_string(lim.vocab_size) + ")");
    if (p.echo) out.prompt_text = tok.decode(r.prompt);
  } else {
    if (p.api == ApiKind::chat && !lim.render_chat)
      throw ApiError(400, "invalid_request_error", "messages", "chat_unsupported", "this server has no chat template renderer");
    const std::string text = p.api == ApiKind::chat ? lim.render_chat(p.messages, lim.chat_template) : *p.prompt_text;
    r.prompt = tok.encode(text, /*parse_special=*/p.api == ApiKind::chat);
    out.prompt_text = text;
  }
  const int n_prompt = static_cast<int>(r.prompt.size());
  if (n_prompt == 0) throw bad_field(p.api == ApiKind::chat ? "messages" : "prompt", "must not be empty");
  if (n_prompt >= lim.max_model_len)
    throw ApiError(400, "invalid_request_error", p.api == ApiKind::chat ? "messages" : "prompt",
                   "context_length_exceeded",
                   "This model's maximum context length is " + std::to_string(lim.max_model_len) +
                       " tokens. However, your prompt has " + std::to_string(n_prompt) + " tokens.");
  const int max_tokens = p.max_tokens.value_or(p.api == ApiKind::chat ? lim.max_model_len - n_prompt : 16);
  if (static_cast<int64_t>(n_prompt) + max_tokens > lim.max_model_len)
    throw ApiError(400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                   "This model's maximum context length is " + std::to_string(lim.max_model_len) +
                       " tokens. However, you requested " + std::to_string(n_prompt + max_tokens) + " tokens (" +
                       std::to_string(n_prompt) + " in the prompt, " + std::to_string(max_tokens) +
                       " for the completion).");
  SamplingParams& sp = r.sampling;
  sp.temperature = p.temperature;
  sp.top_k = p.top_k;
  sp.top_p = p.top_p;
  sp.seed = p.seed.value_or(id * 0x9E3779B97F4A7C15ull);
  sp.max_tokens = max_tokens;
  sp.ignore_eos = p.ignore_eos;
  sp.n = p.n;
  if (p.constraint) {
    const std::string field = p.constraint->field;
    if (p.n > 1) throw bad_field("n", "structured output (" + field + ") needs n = 1 (got " + std::to_string(p.n) + ")");
    if (!lim.constraints)
      throw ApiError(400, "invalid_request_error", field, "unsupported", "this server does not offer structured output");
    try {
      r.constraint = lim.constraints->make(*p.constraint);
    } catch (const grammar::GrammarError& e) {
      throw ApiError(400, "invalid_request_error", field, "unsupported_constraint", e.what());
    }
  }
  return out;
}

}  // namespace servelab::server
