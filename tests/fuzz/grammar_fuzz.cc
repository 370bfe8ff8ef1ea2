// libFuzzer harness: the grammar front ends (JSON Schema, regex, GBNF, request constraints) must
// answer any bytes with a grammar or a GrammarError, never crash, hang or throw anything else; a
// grammar that compiles must give a matcher whose first mask and a few steps work.
// The first byte picks the front end. Built with -DSERVELAB_FUZZ=ON under clang (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/grammar_error.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/regex.h"
#include "engine/grammar/request_constraint.h"
#include "engine/grammar/token_table.h"

namespace {

using namespace servelab;
using namespace servelab::grammar;

// A small vocabulary: the bytes and a few multi-byte tokens that cross JSON structure.
class FuzzTokenizer : public Tokenizer {
 public:
  FuzzTokenizer() {
    for (int b = 0; b < 256; ++b) t_.push_back(std::string(1, static_cast<char>(b)));
    for (const char* s : {"\"", "\",", "\":", "{\"", "\"}", "[{", "}]", "ab", "12", "true", "null", " \""}) t_.push_back(s);
  }
  std::string name() const override { return "fuzz"; }
  std::vector<TokenId> encode(std::string_view, bool) const override { return {}; }
  std::string decode(std::span<const TokenId>, bool) const override { return ""; }
  int vocab_size() const override { return static_cast<int>(t_.size()) + 1; }
  std::optional<TokenId> token_id(std::string_view) const override { return std::nullopt; }
  std::optional<TokenId> eos_id() const override { return static_cast<TokenId>(t_.size()); }
  std::optional<TokenId> bos_id() const override { return std::nullopt; }
  std::string token_bytes(TokenId id, bool) const override {
    return id >= 0 && static_cast<size_t>(id) < t_.size() ? t_[static_cast<size_t>(id)] : std::string();
  }

 private:
  std::vector<std::string> t_;
};

std::shared_ptr<TokenTable> table() {
  static std::shared_ptr<TokenTable> t = TokenTable::build(FuzzTokenizer());
  return t;
}

void exercise(const Grammar& g) {
  GrammarMatcher m(CompiledGrammar::compile(g, table()));
  std::vector<uint32_t> words(static_cast<size_t>(m.n_words()));
  for (int step = 0; step < 8; ++step) {
    m.fill_next_token_bitmask(words.data());
    int32_t pick = -1;
    for (size_t w = 0; w < words.size() && pick < 0; ++w)
      if (words[w]) pick = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(words[w])));
    if (pick < 0) break;
    if (!m.accept_token(pick)) std::abort();  // the mask allowed it
  }
  (void)m.find_jump_forward_string(64);
  m.rollback(m.n_steps());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0: exercise(grammar_from_json_schema_text(text)); break;
      case 1: exercise(grammar_from_regex(text)); break;
      case 2: exercise(grammar_from_gbnf(text)); break;
      default: {
        nlohmann::ordered_json body;
        try {
          body = nlohmann::ordered_json::parse(text);
        } catch (const nlohmann::json::exception&) {
          return 0;
        }
        if (auto spec = parse_request_constraint(body)) exercise(grammar_from_constraint(*spec));
      }
    }
  } catch (const GrammarError&) {
  }
  return 0;
}
