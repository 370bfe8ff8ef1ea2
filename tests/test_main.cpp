// main() of every test binary. Each process gets a fresh temp folder of its own, handed to
// ::testing::TempDir() through TEST_TMPDIR, so tests that ctest runs side by side (-j, one process
// per test) and test runs of several checkouts on one machine never write the same file. The
// folder is removed at exit unless SERVELAB_KEEP_TEST_TMPDIR is set.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace {

/// Set in the environment while a test process owns TEST_TMPDIR, so processes it starts (death
/// tests re-running this binary, the servelab CLI) share the folder instead of making their own.
constexpr const char* kOwner = "SERVELAB_TEST_TMPDIR";

std::string make_private_tmpdir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = (std::filesystem::path(base && *base ? base : "/tmp") / "servelab_test_XXXXXX").string();
  if (!::mkdtemp(pattern.data())) return "";
  return pattern;
}

}  // namespace

int main(int argc, char** argv) {
  std::string owned;
  if (const char* inherited = std::getenv(kOwner); !(inherited && *inherited)) {
    owned = make_private_tmpdir();
    if (owned.empty()) {
      std::perror("test main: mkdtemp");
    } else {
      ::setenv("TEST_TMPDIR", owned.c_str(), 1);
      ::setenv(kOwner, owned.c_str(), 1);
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (!owned.empty() && !std::getenv("SERVELAB_KEEP_TEST_TMPDIR")) {
    std::error_code ec;
    std::filesystem::remove_all(owned, ec);
  }
  return rc;
}
