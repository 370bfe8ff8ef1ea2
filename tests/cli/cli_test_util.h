#pragma once
// Helpers for tests that run the built `servelab` binary: where it is, a scratch folder, running
// a command line and capturing its exit code and output, reading files back.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace servelab::cli_test {

namespace fs = std::filesystem;

/// The servelab binary built beside the tests (absent when only the test target was built).
inline std::string servelab_exe() { return std::string(SERVELAB_BINARY_DIR) + "/servelab"; }

/// Skips the calling test when the binary is missing; use as the first line of a test body.
#define SERVELAB_REQUIRE_BINARY()                                                          \
  do {                                                                                     \
    if (!std::filesystem::exists(::servelab::cli_test::servelab_exe()))                    \
      GTEST_SKIP() << ::servelab::cli_test::servelab_exe() << " not built (build target servelab)"; \
  } while (0)

/// A fresh folder under the gtest temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::path(::testing::TempDir()) / "servelab_cli_XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed under " + ::testing::TempDir());
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

/// Exit code (-1 when killed by a signal) and stdout + stderr of one command.
struct CliResult {
  int code = -1;
  std::string output;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

/// Lines of a text file, without the newline; an unterminated last line counts.
inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// Single-quotes `s` for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs `servelab ARGS...` (each argument quoted for the shell) from the source root, so relative
/// paths in messages read like a user's; output goes to a file in `scratch`.
inline CliResult run_servelab(const std::vector<std::string>& args, const TempDir& scratch) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on `"literal" + temp`.
  std::string cmd = "cd ";
  cmd += shell_quote(SERVELAB_SOURCE_DIR);
  cmd += " && ";
  cmd += shell_quote(servelab_exe());
  for (const auto& a : args) {
    cmd += ' ';
    cmd += shell_quote(a);
  }
  const std::string out = scratch.file("cli_output.txt");
  cmd += " > ";
  cmd += shell_quote(out);
  cmd += " 2>&1 < /dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  r.output = read_text(out);
  return r;
}

/// Whether `name` is an executable on PATH (e.g. gnuplot, which plots need).
inline bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::stringstream ss(path);
  for (std::string dir; std::getline(ss, dir, ':');)
    if (!dir.empty() && ::access((fs::path(dir) / name).c_str(), X_OK) == 0) return true;
  return false;
}

}  // namespace servelab::cli_test
