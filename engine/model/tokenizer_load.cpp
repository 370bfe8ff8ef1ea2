// Reading tokenizer.json (and tokenizer_config.json) into the byte-level BPE tokenizer.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/model/tokenizer_bpe.h"
#include "engine/model/tokenizer_json.h"
#include "engine/model/tokenizer_unicode.h"

namespace servelab {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON (" + e.what() + ")");
  }
}

// A byte-level token name ("Ġhello") as the bytes it stands for; a name with characters outside
// the byte alphabet stands for its own UTF-8 (as the ByteLevel decoder falls back).
std::string byte_level_to_bytes(std::string_view name) {
  static const std::array<int, 512> inverse = [] {
    std::array<int, 512> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_unicode(static_cast<unsigned char>(b))] = b;
    return t;
  }();
  std::string out;
  for (size_t i = 0; i < name.size();) {
    int len;
    const char32_t cp = unicode::decode_at(name, i, &len);
    if (cp >= inverse.size() || inverse[cp] < 0) return std::string(name);
    out += char(inverse[cp]);
    i += len;
  }
  return out;
}

class Parser {
 public:
  explicit Parser(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(path_ + ": " + what); }

  static bool is_type(const json& j, const char* type) {
    return j.is_object() && j.contains("type") && j["type"] == type;
  }
  static std::string type_of(const json& j) {
    return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : j.dump();
  }

  BpeData parse() {
    TokenizerJson raw = read_tokenizer_json(read_file(path_), path_);
    const json& root = raw.rest;
    if (!root.is_object()) fail("expected a JSON object at the top");
    BpeData d;
    d.source = path_;
    if (!root.contains("model") || !root["model"].is_object()) fail("missing \"model\" object");
    parse_model(root["model"], raw, d);
    if (root.contains("added_tokens") && !root["added_tokens"].is_null()) parse_added(root["added_tokens"], d);
    parse_normalizer(root.value("normalizer", json()), d);
    parse_pre_tokenizer(root.value("pre_tokenizer", json()), d);
    const json decoder = root.value("decoder", json());
    if (!is_type(decoder, "ByteLevel"))
      fail("decoder " + type_of(decoder) + " is not supported (only ByteLevel, for byte-level BPE)");
    return d;
  }

 private:
  void parse_model(const json& m, TokenizerJson& raw, BpeData& d) {
    if (m.contains("type") && m["type"] != "BPE")
      fail("model.type " + m["type"].dump() + " is not supported (only BPE)");
    if (m.contains("dropout") && !m["dropout"].is_null() &&
        !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
      fail("model.dropout " + m["dropout"].dump() + " is not supported (only null)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && !m[key].is_null() && m[key] != "")
        fail(std::string("model.") + key + " " + m[key].dump() + " is not supported (byte-level BPE has none)");
    d.ignore_merges = m.value("ignore_merges", false);
    if (!raw.error.empty()) fail(raw.error);
    if (!raw.has_vocab) fail("model.vocab must be an object of token -> id");
    TokenId max_id = -1;
    d.vocab.reserve(raw.vocab.size());
    for (auto& [name, id] : raw.vocab) {
      const TokenId t = TokenId(id);
      if (!d.vocab.emplace(byte_level_to_bytes(name), t).second)
        fail("model.vocab has two entries for " + json(name).dump());
      max_id = std::max(max_id, t);
    }
    d.id_bytes.assign(size_t(max_id + 1), std::string());
    for (const auto& [bytes, id] : d.vocab) d.id_bytes[id] = bytes;
    for (int b = 0; b < 256; ++b) {
      const auto it = d.vocab.find(std::string(1, char(b)));
      if (it == d.vocab.end()) {
        std::string name;
        unicode::append_utf8(name, byte_to_unicode(static_cast<unsigned char>(b)));
        fail("model.vocab lacks the byte-level token " + json(name).dump() + " for byte " + std::to_string(b) +
             " (not a byte-level BPE vocabulary?)");
      }
      d.byte_id[b] = it->second;
    }
    if (!raw.has_merges) fail("model.merges must be an array");
    d.merges.reserve(raw.merges.size());
    for (size_t r = 0; r < raw.merges.size(); ++r) {
      const TokenizerJson::Merge& e = raw.merges[r];
      std::string ab = byte_level_to_bytes(e.left);
      const size_t a_len = ab.size();
      ab += byte_level_to_bytes(e.right);  // the merged token's bytes; the left's are its prefix
      const std::string_view joined = ab;
      const auto ia = d.vocab.find(joined.substr(0, a_len)), ib = d.vocab.find(joined.substr(a_len)),
                 im = d.vocab.find(joined);
      if (ia == d.vocab.end() || ib == d.vocab.end() || im == d.vocab.end())
        fail("model.merges[" + std::to_string(r) + "] " +
             (e.array_form ? json::array({e.left, e.right}).dump() : json(e.left + " " + e.right).dump()) +
             " names a token missing from model.vocab");
      d.merges.insert(ia->second, ib->second, int32_t(r), im->second);  // a repeated pair keeps its first rank
    }
  }

  void parse_added(const json& list, BpeData& d) {
    if (!list.is_array()) fail("added_tokens must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const json& t = list[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string())
        fail(where + " must have an integer \"id\" and a string \"content\"");
      AddedToken a;
      const int64_t id = t["id"].get<int64_t>();
      if (id < 0 || id >= (1LL << 30)) fail(where + ".id must be in [0, 2^30) (got " + std::to_string(id) + ")");
      a.id = TokenId(id);
      a.content = t["content"].get<std::string>();
      if (a.content.empty()) fail(where + ".content must not be empty");
      a.special = t.value("special", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.single_word = t.value("single_word", false);
      if (size_t(a.id) >= d.id_bytes.size()) d.id_bytes.resize(size_t(a.id) + 1);
      d.id_bytes[a.id] = byte_level_to_bytes(a.content);
      d.added.push_back(std::move(a));
    }
    d.is_special.assign(d.id_bytes.size(), false);
    for (const AddedToken& a : d.added) d.is_special[a.id] = a.special;
  }

  void parse_normalizer(const json& n, BpeData& d) {
    if (n.is_null()) return;
    if (is_type(n, "NFC")) {
      d.nfc = true;
      return;
    }
    if (is_type(n, "Sequence") && n.contains("normalizers") && n["normalizers"].is_array()) {
      for (const json& x : n["normalizers"]) parse_normalizer(x, d);
      return;
    }
    fail("normalizer " + type_of(n) + " is not supported (only NFC or none)");
  }

  void parse_byte_level(const json& p, BpeData& d, bool regex_allowed) {
    d.pretok.add_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) {
      if (!regex_allowed) fail("pre_tokenizer ByteLevel with use_regex after a Split is not supported");
      d.pretok.pattern = SplitPattern::gpt2;
    }
  }

  void parse_pre_tokenizer(const json& p, BpeData& d) {
    if (is_type(p, "ByteLevel")) {
      parse_byte_level(p, d, true);
      return;
    }
    const json* split = nullptr;
    const json* byte_level = nullptr;
    if (is_type(p, "Sequence") && p.contains("pretokenizers") && p["pretokenizers"].is_array() &&
        p["pretokenizers"].size() == 2) {
      split = &p["pretokenizers"][0];
      byte_level = &p["pretokenizers"][1];
    }
    if (!split || !is_type(*split, "Split") || !is_type(*byte_level, "ByteLevel"))
      fail("pre_tokenizer " + type_of(p) +
           " is not supported (only ByteLevel, or Sequence [Split with the Llama-3/Qwen2/GPT-2 regex, ByteLevel])");
    const json& s = *split;
    if (s.value("behavior", std::string()) != "Isolated" || s.value("invert", false))
      fail("pre_tokenizer Split behavior " + s.value("behavior", json("?")).dump() +
           (s.value("invert", false) ? " inverted" : "") + " is not supported (only Isolated, not inverted)");
    const std::string regex = s.contains("pattern") && s["pattern"].is_object() && s["pattern"].contains("Regex") &&
                                      s["pattern"]["Regex"].is_string()
                                  ? s["pattern"]["Regex"].get<std::string>()
                                  : std::string();
    if (!parse_split_regex(regex, &d.pretok))
      fail("pre_tokenizer Split pattern " + (s.contains("pattern") ? s["pattern"].dump() : std::string("(none)")) +
           " is not supported (known: the Llama-3, Qwen2 and GPT-2 regexes)");
    const SplitPattern pattern = d.pretok.pattern;
    parse_byte_level(*byte_level, d, false);
    d.pretok.pattern = pattern;
  }

  std::string path_;
};

// A token named in tokenizer_config.json: a string or {"content": ...}; "" for null/absent.
std::string config_token(const json& cfg, const char* key, const std::string& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw std::runtime_error(path + ": " + key + " must be a string or {\"content\": ...} (got " + v.dump() + ")");
}

}  // namespace

BpeData load_bpe_data(const std::string& tokenizer_json_path) { return Parser(tokenizer_json_path).parse(); }

std::unique_ptr<Tokenizer> load_bpe_tokenizer(const std::string& tokenizer_json_path) {
  return std::make_unique<BpeTokenizer>(load_bpe_data(tokenizer_json_path));
}

std::unique_ptr<Tokenizer> load_tokenizer_from_dir(const std::string& model_dir) {
  const fs::path json_path = fs::path(model_dir) / "tokenizer.json";
  if (!fs::exists(json_path)) return nullptr;
  BpeData d = load_bpe_data(json_path.string());
  const fs::path cfg_path = fs::path(model_dir) / "tokenizer_config.json";
  if (fs::exists(cfg_path)) {
    const std::string path = cfg_path.string();
    const json cfg = read_json(path);
    if (!cfg.is_object()) throw std::runtime_error(path + ": expected a JSON object at the top");
    const auto resolve = [&](const char* key) -> std::optional<TokenId> {
      const std::string name = config_token(cfg, key, path);
      if (name.empty()) return std::nullopt;
      const auto id = find_token(d, name);
      if (!id) throw std::runtime_error(path + ": " + key + " \"" + name + "\" is not a token of " + json_path.string());
      return id;
    };
    d.eos = resolve("eos_token");
    d.bos = resolve("bos_token");
    if (cfg.contains("chat_template")) {
      const json& t = cfg["chat_template"];
      if (t.is_string()) {
        d.chat_template = t.get<std::string>();
      } else if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const json& e : t)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
            d.chat_template = e["template"].get<std::string>();
      } else if (!t.is_null()) {
        throw std::runtime_error(path + ": chat_template must be a string or a list of {name, template}");
      }
    }
  }
  return std::make_unique<BpeTokenizer>(std::move(d));
}

}  // namespace servelab
