// The byte tokenizer: one id per UTF-8 byte, for models that ship no tokenizer.json.
#include <stdexcept>

#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_unicode.h"

namespace servelab {

const std::string& Tokenizer::chat_template() const {
  static const std::string none;
  return none;
}

std::string Tokenizer::token_bytes(TokenId id, bool skip_special) const {
  const TokenId one[1] = {id};
  return decode(one, skip_special);
}

std::string StreamDecoder::push(TokenId id) {
  pending_ += tokenizer_.token_bytes(id, skip_special_);
  // Emit everything up to a trailing sequence that is valid so far but incomplete.
  size_t i = 0;
  while (i < pending_.size()) {
    int len;
    const char32_t cp = unicode::decode_at(pending_, i, &len);
    if (cp == unicode::kInvalid && i + len == pending_.size() &&
        static_cast<unsigned char>(pending_[i]) >= 0xC2 && static_cast<unsigned char>(pending_[i]) <= 0xF4)
      break;  // a character's first bytes: wait for the rest
    i += len;
  }
  std::string out = unicode::to_valid_utf8(std::string_view(pending_).substr(0, i));
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = unicode::to_valid_utf8(pending_);
  pending_.clear();
  return out;
}

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  ByteTokenizer(int vocab_size, std::optional<TokenId> eos) : vocab_size_(vocab_size), eos_(eos) {}

  std::string name() const override { return "bytes"; }

  std::vector<TokenId> encode(std::string_view text, bool) const override {
    std::vector<TokenId> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }

  // Ids above 255 have no text of their own (a random-weight model samples them freely); they
  // read as "<|id|>" so output stays visible, and count as special (skip_special drops them).
  // So does eos when the model's is a byte id (tiny's is 1): a stream must not end in "\x01".
  std::string decode(std::span<const TokenId> ids, bool skip_special) const override {
    std::string bytes, out;
    const auto flush = [&] {
      out += unicode::to_valid_utf8(bytes);
      bytes.clear();
    };
    for (const TokenId id : ids) {
      if (id >= 0 && id < 256 && !is_eos(id)) {
        bytes += static_cast<char>(id);
        continue;
      }
      if (skip_special) continue;  // dropped ids leave the bytes around them joined
      flush();
      out += "<|" + std::to_string(id) + "|>";
    }
    flush();
    return out;
  }

  std::string token_bytes(TokenId id, bool skip_special) const override {
    if (id >= 0 && id < 256 && !is_eos(id)) return std::string(1, static_cast<char>(id));
    return skip_special ? "" : "<|" + std::to_string(id) + "|>";
  }

  int vocab_size() const override { return vocab_size_; }

  std::optional<TokenId> token_id(std::string_view token) const override {
    if (token.size() == 1) return static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }

  std::optional<TokenId> eos_id() const override { return eos_; }
  bool is_eos(TokenId id) const { return eos_ && id == *eos_; }
  std::optional<TokenId> bos_id() const override { return std::nullopt; }

 private:
  int vocab_size_;
  std::optional<TokenId> eos_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer(int vocab_size, std::optional<TokenId> eos) {
  if (vocab_size < 256)
    throw std::invalid_argument("byte tokenizer: vocab_size must be >= 256 (got " + std::to_string(vocab_size) + ")");
  if (eos && (*eos < 0 || *eos >= vocab_size))
    throw std::invalid_argument("byte tokenizer: eos must be in [0, " + std::to_string(vocab_size) + ") (got " +
                                std::to_string(*eos) + ")");
  return std::make_unique<ByteTokenizer>(vocab_size, eos);
}

}  // namespace servelab
