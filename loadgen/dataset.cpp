#include "loadgen/dataset.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

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
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// 1-based line of byte offset `pos` in text.
int line_of(const std::string& text, size_t pos) {
  pos = std::min(pos, text.size());
  int line = 1;
  for (size_t i = 0; i < pos; ++i)
    if (text[i] == '\n') ++line;
  return line;
}

/// Byte offsets where each element of the top-level JSON array begins (strings and escapes
/// respected), so an entry with a wrong field can be reported at its line.
std::vector<size_t> top_level_element_offsets(const std::string& text) {
  std::vector<size_t> out;
  int depth = 0;
  bool in_string = false, escaped = false, expect_element = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (depth == 1 && expect_element && c != ']') {
      out.push_back(i);
      expect_element = false;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      ++depth;
      if (depth == 1 && c == '[') expect_element = true;
    } else if (c == ']' || c == '}') --depth;
    else if (c == ',' && depth == 1) expect_element = true;
  }
  return out;
}

json parse_json(const std::string& path, const std::string& text, int line_offset) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte is 1-based and points just past the offending character.
    const size_t pos = e.byte > 0 ? e.byte - 1 : 0;
    std::string what = e.what();
    const auto cut = what.find("parse error");
    if (cut != std::string::npos) what = what.substr(cut);
    fail(path, line_offset + line_of(text, pos) - 1, "invalid JSON: " + what);
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

Dataset load_sharegpt(const std::string& path) {
  const std::string text = read_file(path);
  const json doc = parse_json(path, text, 1);
  if (!doc.is_array())
    fail(path, 1, std::string("a ShareGPT dataset is a JSON list of {\"conversations\": [...]} (got a JSON ") +
                      doc.type_name() + "); for one object a line use format: jsonl");
  const std::vector<size_t> offsets = top_level_element_offsets(text);
  Dataset d;
  d.path = path;
  d.format = DatasetFormat::sharegpt;
  for (size_t i = 0; i < doc.size(); ++i) {
    const int line = i < offsets.size() ? line_of(text, offsets[i]) : 1;
    const json& entry = doc[i];
    if (!entry.is_object()) fail(path, line, "entry " + std::to_string(i) + " must be an object (got " + entry.type_name() + ")");
    const auto conv = entry.find("conversations");
    if (conv == entry.end()) fail(path, line, "entry " + std::to_string(i) + " has no \"conversations\"");
    if (!conv->is_array())
      fail(path, line, "entry " + std::to_string(i) + ": \"conversations\" must be a list (got " + conv->type_name() + ")");
    if (conv->size() < 2) {
      ++d.n_skipped;
      continue;
    }
    int lens[2];
    for (int t = 0; t < 2; ++t) {
      const json& turn = (*conv)[static_cast<size_t>(t)];
      if (!turn.is_object())
        fail(path, line, "entry " + std::to_string(i) + ": conversation turn " + std::to_string(t) + " must be an object");
      lens[t] = count_text_tokens(string_field(path, line, turn, "value"));
    }
    if (lens[0] < 1 || lens[1] < 1) {
      ++d.n_skipped;
      continue;
    }
    d.entries.push_back({lens[0], lens[1], line});
  }
  if (d.entries.empty()) fail(path, 1, "no usable entry (need a prompt turn followed by a reply)");
  return d;
}

Dataset load_jsonl(const std::string& path) {
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
      p.prompt_tokens = count_text_tokens(string_field(path, line, obj, "prompt"));
      p.output_tokens = count_text_tokens(string_field(path, line, obj, "output"));
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

Dataset load_dataset(const std::string& path, DatasetFormat format) {
  return format == DatasetFormat::sharegpt ? load_sharegpt(path) : load_jsonl(path);
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
