#pragma once
// Tokenizers: text <-> token ids. A model folder with a Hugging Face tokenizer.json gets the
// byte-level BPE it describes (Llama-3, Qwen2, Qwen3 ship one); a model without one (a preset with
// random weights) gets the byte tokenizer, one token per UTF-8 byte, so text prompts still work.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"

namespace servelab {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  ///< "bpe:<file>" or "bytes"
  /// Ids for text. With parse_special, special tokens written in the text ("<|im_end|>") map to
  /// their ids; without, they are encoded as plain text.
  virtual std::vector<TokenId> encode(std::string_view text, bool parse_special = true) const = 0;
  /// Text for ids; bytes split across ids are joined before UTF-8 decoding.
  virtual std::string decode(std::span<const TokenId> ids, bool skip_special = false) const = 0;
  virtual int vocab_size() const = 0;
  virtual std::optional<TokenId> token_id(std::string_view token) const = 0;
  virtual std::optional<TokenId> eos_id() const = 0;
  virtual std::optional<TokenId> bos_id() const = 0;
  /// The model's chat template (tokenizer_config.json "chat_template"), "" when none was given;
  /// pass it to render_chat. Not pure, so other Tokenizer implementations need not provide it.
  virtual const std::string& chat_template() const;
  /// The raw bytes of one id (maybe part of a UTF-8 character; "" for an id without text or a
  /// skipped special one). Not pure: the default is decode({id}), which loses split characters.
  virtual std::string token_bytes(TokenId id, bool skip_special = false) const;
};

/// Text deltas for streaming responses: feed ids as they are sampled; the bytes of a character
/// split across ids are held until it completes, so every delta is valid UTF-8 and the deltas
/// concatenate to decode(ids). One per request; not thread-safe.
class StreamDecoder {
 public:
  /// skip_special: leave special tokens (<|im_end|>) out of the text, as OpenAI servers do.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}
  /// The text this id completes ("" while a character is still partial).
  std::string push(TokenId id);
  /// What is still held at the end of the stream, invalid bytes as U+FFFD.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

/// Reads a Hugging Face tokenizer.json (model.type BPE with byte-level pre-tokenizer and decoder).
/// Throws std::runtime_error naming the file and what is unsupported or malformed.
/// encode() adds no bos/eos of its own (as HF's add_special_tokens=False); thread-safe.
std::unique_ptr<Tokenizer> load_bpe_tokenizer(const std::string& tokenizer_json_path);

/// One token per UTF-8 byte (ids 0..255), for models without a tokenizer.json; vocab_size must
/// be >= 256. eos is the model's eos token when given.
std::unique_ptr<Tokenizer> make_byte_tokenizer(int vocab_size, std::optional<TokenId> eos);

/// The model folder's tokenizer.json (also reads tokenizer_config.json for eos/bos and the chat
/// template) when present, else nullptr. Throws std::runtime_error naming the file on a bad one.
std::unique_ptr<Tokenizer> load_tokenizer_from_dir(const std::string& model_dir);

/// One chat message as OpenAI's API carries it.
struct ChatMessage {
  std::string role;     ///< "system", "user", "assistant"
  std::string content;
};

/// The prompt formats render_chat knows.
enum class ChatFormat { chatml, llama3, llama2 };

/// The format a chat template's markers name: "<|start_header_id|>" llama3, "[INST]" llama2,
/// else (ChatML's "<|im_start|>", an unknown template, or "") chatml.
ChatFormat detect_chat_format(const std::string& chat_template);

/// Renders messages into the prompt text. The model's chat template (tokenizer_config.json
/// "chat_template") is recognised by its markers (ChatML as Qwen uses, Llama-3 headers, Llama-2
/// [INST]); an unrecognised or absent template uses the documented default, ChatML
/// (docs/tokenizer.md). Throws std::invalid_argument naming the message for a role the format
/// cannot express (Llama-2 knows only system, user, assistant).
std::string render_chat(std::span<const ChatMessage> messages, const std::string& chat_template,
                        bool add_generation_prompt = true);

}  // namespace servelab
