#pragma once
// Reading a JSON-lines file of one record type, with errors that name the file and line.
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace servelab {

/// Parses every non-blank line of `path` as a T (through its from_json), then calls
/// `check(value, line)` when given (it throws std::exception to reject the line). Throws
/// std::runtime_error("path: cannot open") or ("path:line: message").
/// A last line without its '\n' that does not parse is what a writer killed mid-line leaves
/// (lines are written whole, newline last): it is dropped, and *cut_tail (when given) set true.
template <typename T>
std::vector<T> read_jsonl(const std::string& path,
                          const std::function<void(const T&, int line)>& check = nullptr,
                          bool* cut_tail = nullptr) {
  if (cut_tail) *cut_tail = false;
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<T> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      T value = nlohmann::json::parse(line).get<T>();
      if (check) check(value, n);
      out.push_back(std::move(value));
    } catch (const std::exception& e) {
      if (in.eof()) {  // the last line, unterminated: a cut write, not a damaged file
        if (cut_tail) *cut_tail = true;
        break;
      }
      throw std::runtime_error(path + ":" + std::to_string(n) + ": " + e.what());
    }
  }
  return out;
}

}  // namespace servelab
