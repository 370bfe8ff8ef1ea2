#include "engine/model/tokenizer_json.h"

#include <stdexcept>

namespace servelab {
namespace {

using nlohmann::json;

class Sax final : public nlohmann::json_sax<json> {
 public:
  explicit Sax(TokenizerJson& out) : out_(out) {}

  std::string parse_message;

  bool null() override { return value(json()); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool binary(binary_t& v) override { return value(json(v)); }

  bool string(string_t& v) override {
    if (capture_ == Capture::merges && depth_ == 1) {  // "a b"
      const size_t sp = v.find(' ');
      if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos)
        fail_merge("must be \"left right\" (got " + json(v).dump() + ")");
      else
        out_.merges.push_back({v.substr(0, sp), v.substr(sp + 1), false});
      ++merge_index_;
      return true;
    }
    if (capture_ == Capture::merges && depth_ == 2) {
      if (pair_n_ < 2) pair_[pair_n_] = std::move(v);
      ++pair_n_;
      return true;
    }
    return value(json(std::move(v)));
  }

  bool start_object(std::size_t) override {
    if (begin_capture(true)) return true;
    if (capture_ != Capture::none) {
      if (capture_ == Capture::vocab && depth_ == 1) fail("model.vocab[" + json(vocab_key_).dump() + "] must be an id");
      if (capture_ == Capture::merges && depth_ == 1) fail_merge("must be \"left right\" or [left, right] (got an object)");
      if (capture_ == Capture::merges && depth_ == 2) pair_bad_ = true;
      ++depth_;
      return true;
    }
    return open(json::object());
  }

  bool start_array(std::size_t) override {
    if (begin_capture(false)) return true;
    if (capture_ != Capture::none) {
      if (capture_ == Capture::merges && depth_ == 1) {
        pair_n_ = 0, pair_bad_ = false;
      } else {
        if (capture_ == Capture::vocab && depth_ == 1) fail("model.vocab[" + json(vocab_key_).dump() + "] must be an id");
        if (capture_ == Capture::merges && depth_ == 2) pair_bad_ = true;
      }
      ++depth_;
      return true;
    }
    return open(json::array());
  }

  bool key(string_t& k) override {
    if (capture_ == Capture::vocab && depth_ == 1) {
      vocab_key_ = std::move(k);
      return true;
    }
    if (capture_ != Capture::none) return true;
    if (!stack_.empty() && stack_.back() == model_ && (k == "vocab" || k == "merges")) {
      pending_ = k == "vocab" ? Capture::vocab : Capture::merges;
      (k == "vocab" ? out_.has_vocab : out_.has_merges) = true;
      return true;
    }
    key_ = std::move(k);
    return true;
  }

  bool end_object() override { return close(); }

  bool end_array() override {
    if (capture_ == Capture::merges && depth_ == 2) {
      if (pair_n_ == 2 && !pair_bad_) out_.merges.push_back({std::move(pair_[0]), std::move(pair_[1]), true});
      else fail_merge("must be \"left right\" or [left, right] (got an array of " + std::to_string(pair_n_) + ")");
      ++merge_index_;
    }
    return close();
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    parse_message = e.what();
    return false;
  }

 private:
  enum class Capture { none, vocab, merges, skip };

  // A value in the current container (or a vocab id, or a misplaced value in merges).
  bool value(json v) {
    if (pending_ != Capture::none) {  // "vocab": 3 instead of an object
      fail(std::string("model.") + (pending_ == Capture::vocab ? "vocab must be an object of token -> id"
                                                               : "merges must be an array"));
      pending_ = Capture::none;
      return true;
    }
    switch (capture_) {
      case Capture::vocab:
        if (depth_ == 1) {
          if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (1LL << 30))
            out_.vocab.emplace_back(std::move(vocab_key_), v.get<int64_t>());
          else
            fail("model.vocab[" + json(vocab_key_).dump() + "] must be an id in [0, 2^30) (got " + v.dump() + ")");
        }
        return true;
      case Capture::merges:
        if (depth_ == 1) {
          fail_merge("must be \"left right\" or [left, right] (got " + v.dump() + ")");
          ++merge_index_;
        } else if (depth_ == 2) {
          pair_bad_ = true, ++pair_n_;
        }
        return true;
      case Capture::skip: return true;
      case Capture::none: break;
    }
    if (stack_.empty()) {
      out_.rest = std::move(v);
      return true;
    }
    json& top = *stack_.back();
    if (top.is_object()) top[key_] = std::move(v);
    else top.push_back(std::move(v));
    return true;
  }

  // Starts capturing model.vocab / model.merges when the value after their key opens.
  bool begin_capture(bool is_object) {
    if (pending_ == Capture::none) return false;
    const bool right_kind = (pending_ == Capture::vocab) == is_object;
    if (!right_kind)
      fail(std::string("model.") + (pending_ == Capture::vocab ? "vocab must be an object of token -> id"
                                                               : "merges must be an array"));
    capture_ = right_kind ? pending_ : Capture::skip;
    pending_ = Capture::none;
    depth_ = 1;
    return true;
  }

  bool open(json container) {
    json* child;
    if (stack_.empty()) {
      out_.rest = std::move(container);
      child = &out_.rest;
    } else if (stack_.back()->is_object()) {
      json& slot = (*stack_.back())[key_];
      slot = std::move(container);
      child = &slot;
      if (stack_.size() == 1 && key_ == "model" && child->is_object()) model_ = child;
    } else {
      stack_.back()->push_back(std::move(container));
      child = &stack_.back()->back();
    }
    stack_.push_back(child);
    return true;
  }

  bool close() {
    if (capture_ != Capture::none) {
      if (--depth_ == 0) capture_ = Capture::none;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  void fail(const std::string& what) {
    if (out_.error.empty()) out_.error = what;
  }
  void fail_merge(const std::string& what) { fail("model.merges[" + std::to_string(merge_index_) + "] " + what); }

  TokenizerJson& out_;
  std::vector<json*> stack_;  // the open containers of `rest`, innermost last
  json* model_ = nullptr;     // rest["model"] once open
  std::string key_, vocab_key_;
  Capture pending_ = Capture::none, capture_ = Capture::none;
  int depth_ = 0;             // nesting inside the captured value (1 = its own level)
  size_t merge_index_ = 0;
  std::string pair_[2];
  int pair_n_ = 0;
  bool pair_bad_ = false;
};

}  // namespace

TokenizerJson read_tokenizer_json(const std::string& text, const std::string& path) {
  TokenizerJson out;
  Sax sax(out);
  if (!json::sax_parse(text, &sax)) throw std::runtime_error(path + ": not valid JSON (" + sax.parse_message + ")");
  return out;
}

}  // namespace servelab
