#include "loadgen/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/model/tokenizer.h"

namespace servelab {

using nlohmann::json;

const char* to_string(DatasetFormat f) { return f == DatasetFormat::sharegpt ? "sharegpt" : "jsonl"; }

int count_text_tokens(std::string_view text) { return static_cast<int>((text.size() + 3) / 4); }

namespace {

[[noreturn]] void fail(const std::string& path, int line, const std::string& msg) {
  throw std::runtime_error(path + ":" + std::to_string(line) + ": " + msg);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open file");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  std::string text;
  if (size > 0) {  // one read into one buffer (a ShareGPT file is ~650 MB)
    text.resize(static_cast<size_t>(size));
    in.seekg(0);
    in.read(text.data(), size);
    if (in.gcount() != size) throw std::runtime_error(path + ": read failed");
  }
  return text;
}

/// 1-based line of byte offset `pos` in text.
int line_of(std::string_view text, size_t pos) {
  pos = std::min(pos, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
}

/// The message nlohmann gives for a parse error, from "parse error ..." on.
std::string parse_error_text(const std::string& what) {
  const auto cut = what.find("parse error");
  return cut == std::string::npos ? what : what.substr(cut);
}

/// Finds nlohmann's first parse error in a text without building anything (a SAX pass that keeps
/// nothing), so a syntax error in a 650 MB file costs one pass, not a whole JSON tree.
class SyntaxProbe final : public nlohmann::json_sax<json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    failed = true;
    byte = position;
    what = e.what();
    return false;
  }
  bool failed = false;
  size_t byte = 0;  ///< 1-based, just past the offending character
  std::string what;
};

/// Reports the first syntax error of the whole text at its line. `fallback_line` names the place
/// if the parser finds none (the caller's scan found the problem: unexpected end or trailing text).
[[noreturn]] void fail_syntax(const std::string& path, const std::string& text, int fallback_line) {
  SyntaxProbe probe;
  json::sax_parse(text, &probe);
  if (!probe.failed) fail(path, fallback_line, "invalid JSON");
  fail(path, line_of(text, probe.byte > 0 ? probe.byte - 1 : 0), "invalid JSON: " + parse_error_text(probe.what));
}

json parse_json(const std::string& path, const std::string& text, int line_offset) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte is 1-based and points just past the offending character.
    const size_t pos = e.byte > 0 ? e.byte - 1 : 0;
    fail(path, line_offset + line_of(text, pos) - 1, "invalid JSON: " + parse_error_text(e.what()));
  } catch (const json::exception& e) {  // e.g. out_of_range 406: a number too large for a double
    fail(path, line_offset, std::string("invalid JSON: ") + e.what());
  }
}

/// A non-negative integer field (JSON number with no fraction).
int int_field(const std::string& path, int line, const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail(path, line, std::string("missing \"") + key + "\"");
  if (!it->is_number()) fail(path, line, std::string("\"") + key + "\" must be a number (got " + it->dump() + ")");
  const double v = it->get<double>();
  if (!(v >= 0) || v != std::floor(v) || v > 1e9)
    fail(path, line, std::string("\"") + key + "\" must be a non-negative integer (got " + it->dump() + ")");
  return static_cast<int>(v);
}

const std::string& string_field(const std::string& path, int line, const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail(path, line, std::string("missing \"") + key + "\"");
  if (!it->is_string()) fail(path, line, std::string("\"") + key + "\" must be a string (got " + it->type_name() + ")");
  return it->get_ref<const std::string&>();
}

/// Adds one ShareGPT entry's lengths to `d`, or counts it skipped (fewer than two turns, or an
/// empty one).
void add_sharegpt_entry(const std::string& path, int line, size_t i, const json& entry, Dataset& d,
                        const Tokenizer* tok) {
  if (!entry.is_object()) fail(path, line, "entry " + std::to_string(i) + " must be an object (got " + entry.type_name() + ")");
  const auto conv = entry.find("conversations");
  if (conv == entry.end()) fail(path, line, "entry " + std::to_string(i) + " has no \"conversations\"");
  if (!conv->is_array())
    fail(path, line, "entry " + std::to_string(i) + ": \"conversations\" must be a list (got " + conv->type_name() + ")");
  if (conv->size() < 2) {
    ++d.n_skipped;
    return;
  }
  int lens[2];
  std::vector<TokenId> prompt_ids;
  for (int t = 0; t < 2; ++t) {
    const json& turn = (*conv)[static_cast<size_t>(t)];
    if (!turn.is_object())
      fail(path, line, "entry " + std::to_string(i) + ": conversation turn " + std::to_string(t) + " must be an object");
    const std::string& text = string_field(path, line, turn, "value");
    if (tok) {
      std::vector<TokenId> ids = tok->encode(text, false);
      lens[t] = static_cast<int>(ids.size());
      if (t == 0) prompt_ids = std::move(ids);
    } else {
      lens[t] = count_text_tokens(text);
    }
  }
  if (lens[0] < 1 || lens[1] < 1) {
    ++d.n_skipped;
    return;
  }
  d.entries.push_back({lens[0], lens[1], line, std::move(prompt_ids)});
}

bool is_json_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/// End of the JSON value that starts at `i` inside the top-level array: the offset of the ',' or
/// ']' at its own depth after it, or text.size() when there is none. Strings are skipped with
/// memchr (a quote is escaped when an odd run of backslashes precedes it). The value itself is
/// checked by the parser afterwards; this only has to find where it ends.
size_t element_end(const std::string& text, size_t i) {
  const size_t n = text.size();
  int depth = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '"') {
      size_t q = i + 1;
      for (;;) {
        const void* hit = q < n ? std::memchr(text.data() + q, '"', n - q) : nullptr;
        if (!hit) return n;
        q = static_cast<size_t>(static_cast<const char*>(hit) - text.data());
        size_t backslashes = 0;
        while (text[q - 1 - backslashes] == '\\') ++backslashes;
        if (backslashes % 2 == 0) break;
        ++q;
      }
      i = q + 1;
      continue;
    }
    if (c == '[' || c == '{') ++depth;
    else if (c == ']' || c == '}') {
      if (depth == 0) return i;
      --depth;
    } else if (c == ',' && depth == 0) return i;
    ++i;
  }
  return n;
}

/// One linear pass: a scan finds each top-level element, the parser reads that element alone,
/// and the line number advances by the newlines between consecutive element starts. A file of N
/// entries costs O(size) (the file is never rescanned per entry) and only one entry's JSON tree is
/// held at a time.
Dataset load_sharegpt(const std::string& path, const Tokenizer* tok) {
  const std::string text = read_file(path);
  const size_t n = text.size();
  Dataset d;
  d.path = path;
  d.format = DatasetFormat::sharegpt;

  size_t i = 0;
  int line = 1;
  size_t counted = 0;  // newlines in text[0, counted) are counted in `line`
  auto line_at = [&](size_t pos) {
    line += static_cast<int>(std::count(text.begin() + static_cast<std::ptrdiff_t>(counted),
                                        text.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
    counted = pos;
    return line;
  };
  auto skip_space = [&] {
    while (i < n && is_json_space(text[i])) ++i;
  };
  skip_space();
  if (i >= n || text[i] != '[') {
    const json doc = parse_json(path, text, 1);  // a syntax error, or not a list: say which
    fail(path, 1, std::string("a ShareGPT dataset is a JSON list of {\"conversations\": [...]} (got a JSON ") +
                      doc.type_name() + "); for one object a line use format: jsonl");
  }
  ++i;
  skip_space();
  if (i < n && text[i] == ']') {
    ++i;
  } else {
    for (size_t index = 0;; ++index) {
      const size_t begin = i;
      const int begin_line = line_at(begin);
      i = element_end(text, begin);
      if (i >= n) fail_syntax(path, text, line_at(n));
      json entry;
      try {
        entry = json::parse(text.data() + begin, text.data() + i);
      } catch (const json::parse_error&) {
        fail_syntax(path, text, begin_line);
      } catch (const json::exception& e) {  // out_of_range 406: a number too large for a double
        fail(path, begin_line, std::string("invalid JSON: ") + e.what());
      }
      add_sharegpt_entry(path, begin_line, index, entry, d, tok);
      if (text[i++] == ']') break;
      skip_space();
    }
  }
  skip_space();
  if (i < n) fail_syntax(path, text, line_at(i));
  if (d.entries.empty()) fail(path, 1, "no usable entry (need a prompt turn followed by a reply)");
  return d;
}

Dataset load_jsonl(const std::string& path, const Tokenizer* tok) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open file");
  Dataset d;
  d.path = path;
  d.format = DatasetFormat::jsonl;
  std::string text;
  int line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json obj = parse_json(path, text, line);
    if (!obj.is_object()) fail(path, line, std::string("each line must be a JSON object (got ") + obj.type_name() + ")");
    LengthPair p;
    p.line = line;
    if (obj.contains("prompt_tokens") || obj.contains("output_tokens")) {
      p.prompt_tokens = int_field(path, line, obj, "prompt_tokens");
      p.output_tokens = int_field(path, line, obj, "output_tokens");
    } else if (obj.contains("prompt") || obj.contains("output")) {
      const std::string& prompt = string_field(path, line, obj, "prompt");
      const std::string& output = string_field(path, line, obj, "output");
      if (tok) {
        p.prompt_ids = tok->encode(prompt, false);
        p.prompt_tokens = static_cast<int>(p.prompt_ids.size());
        p.output_tokens = static_cast<int>(tok->encode(output, false).size());
      } else {
        p.prompt_tokens = count_text_tokens(prompt);
        p.output_tokens = count_text_tokens(output);
      }
    } else {
      fail(path, line, "expected {\"prompt_tokens\": n, \"output_tokens\": m} or {\"prompt\": text, \"output\": text}");
    }
    if (p.prompt_tokens < 1 || p.output_tokens < 1) {
      ++d.n_skipped;
      continue;
    }
    d.entries.push_back(p);
  }
  if (d.entries.empty()) fail(path, std::max(line, 1), "no usable entry (every line empty or with a zero length)");
  return d;
}

}  // namespace

Dataset load_dataset(const std::string& path, DatasetFormat format, const Tokenizer* tokenizer) {
  return format == DatasetFormat::sharegpt ? load_sharegpt(path, tokenizer) : load_jsonl(path, tokenizer);
}

std::vector<TraceEntry> load_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open file");
  std::vector<TraceEntry> out;
  std::string text;
  int line = 0;
  double first = 0.0, prev = 0.0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json obj = parse_json(path, text, line);
    if (!obj.is_object()) fail(path, line, std::string("each line must be a JSON object (got ") + obj.type_name() + ")");
    const auto ts = obj.find("timestamp");
    if (ts == obj.end()) fail(path, line, "missing \"timestamp\" (seconds)");
    if (!ts->is_number() || !std::isfinite(ts->get<double>()))
      fail(path, line, "\"timestamp\" must be a finite number of seconds (got " + ts->dump() + ")");
    TraceEntry e;
    e.line = line;
    const double t = ts->get<double>();
    if (t < 0) fail(path, line, "\"timestamp\" must be >= 0 seconds (got " + ts->dump() + ")");
    if (out.empty()) first = t;
    else if (t < prev)
      fail(path, line, "timestamps must not decrease (" + ts->dump() + " after " + json(prev).dump() + ")");
    prev = t;
    e.timestamp_s = t - first;
    e.prompt_tokens = int_field(path, line, obj, "prompt_tokens");
    e.output_tokens = int_field(path, line, obj, "output_tokens");
    if (e.prompt_tokens < 1) fail(path, line, "\"prompt_tokens\" must be >= 1");
    if (e.output_tokens < 1) fail(path, line, "\"output_tokens\" must be >= 1");
    out.push_back(e);
  }
  if (out.empty()) fail(path, 1, "empty trace (expected one JSON object a line)");
  return out;
}

}  // namespace servelab
