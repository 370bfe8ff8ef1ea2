// Chat prompts: the three formats open models use, picked by the markers of the model's template.
// A Jinja interpreter is deliberately not embedded: these renderings equal what the templates
// produce for plain text messages (no tools, no images), which is what serving benchmarks send.
#include <stdexcept>

#include "engine/model/tokenizer.h"

namespace servelab {
namespace {

std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Qwen2/Qwen3 and every ChatML model: <|im_start|>role\ncontent<|im_end|>\n ...
std::string render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// Llama-3 (Meta's 3.0 template; content is stripped as the template does).
std::string render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out = "<|begin_of_text|>";
  for (const ChatMessage& m : messages)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Llama-2 chat: the system prompt folds into the first user turn inside <<SYS>>; each user turn
// opens "<s>[INST] ", each assistant turn closes " </s>". There is no generation prompt to add.
std::string render_llama2(std::span<const ChatMessage> messages) {
  std::string system;
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    first = 1;
  }
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    std::string content = m.content;
    if (i == first && first == 1) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
    if (m.role == "user") {
      out += "<s>[INST] " + trim(content) + " [/INST]";
    } else if (m.role == "assistant") {
      out += ' ';
      out += trim(content);
      out += " </s>";
    } else {
      throw std::invalid_argument("messages[" + std::to_string(i) + "].role must be user or assistant " +
                                  (m.role == "system" ? "(system only first) " : "") +
                                  "for the Llama-2 [INST] template (got \"" + m.role + "\")");
    }
  }
  return out;
}

}  // namespace

ChatFormat detect_chat_format(const std::string& chat_template) {
  if (chat_template.find("<|start_header_id|>") != std::string::npos) return ChatFormat::llama3;
  if (chat_template.find("<|im_start|>") != std::string::npos) return ChatFormat::chatml;
  if (chat_template.find("[INST]") != std::string::npos) return ChatFormat::llama2;
  return ChatFormat::chatml;
}

std::string render_chat(std::span<const ChatMessage> messages, const std::string& chat_template,
                        bool add_generation_prompt) {
  switch (detect_chat_format(chat_template)) {
    case ChatFormat::llama3: return render_llama3(messages, add_generation_prompt);
    case ChatFormat::llama2: return render_llama2(messages);
    case ChatFormat::chatml: break;
  }
  return render_chatml(messages, add_generation_prompt);
}

}  // namespace servelab
