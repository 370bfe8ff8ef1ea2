#pragma once
// Reading a JSON-lines file of one record type, with errors that name the file and line.
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace servelab {

/// Parses every non-blank line of `path` as a T (through its from_json). Throws
/// std::runtime_error("path: cannot open") or ("path:line: message").
template <typename T>
std::vector<T> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<T> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(nlohmann::json::parse(line).get<T>());
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(n) + ": " + e.what());
    }
  }
  return out;
}

}  // namespace servelab
