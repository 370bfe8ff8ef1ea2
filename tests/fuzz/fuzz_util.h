#pragma once
// Helpers shared by the parser harnesses (tests/fuzz/*_fuzz.cc): a private scratch folder per
// fuzzing process, and writing the fuzzer's bytes to a file there (the readers take paths).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace servelab::fuzz {

/// /tmp/servelab-fuzz-PID (created on first use; one per process, so parallel jobs do not clash).
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const auto d = std::filesystem::temp_directory_path() / ("servelab-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir;
}

/// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

/// Splits the input at each occurrence of `sep` (at most max_parts parts; the last keeps the rest).
inline std::vector<std::string_view> split_parts(std::string_view in, std::string_view sep, size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = in.find(sep);
    if (at == std::string_view::npos) break;
    parts.push_back(in.substr(0, at));
    in.remove_prefix(at + sep.size());
  }
  parts.push_back(in);
  return parts;
}

}  // namespace servelab::fuzz
