// The build's commit is embedded at build time by scripts/build-info.cmake (not read from the
// directory servelab runs in), is regenerated after a commit, and says "unknown" outside git.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "analysis/environment.h"

namespace servelab::analysis {
namespace {

namespace fs = std::filesystem;

int sh(const std::string& cmd) { return std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()); }

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs the build-info script on `src`; returns the header it wrote.
std::string build_info_header(const fs::path& src, const fs::path& out) {
  const std::string cmd = std::string("'") + SERVELAB_CMAKE_COMMAND + "' -DSOURCE_DIR='" + src.string() + "' -DOUTPUT='" +
                          out.string() + "' -P '" + SERVELAB_SOURCE_DIR + "/scripts/build-info.cmake'";
  EXPECT_EQ(sh(cmd), 0) << cmd;
  return read(out);
}

std::string head_of(const fs::path& repo) {
  const fs::path out = repo.parent_path() / "head.txt";
  sh("git -C '" + repo.string() + "' rev-parse HEAD > '" + out.string() + "'");
  std::string h = read(out);
  while (!h.empty() && h.back() == '\n') h.pop_back();
  return h;
}

TEST(BuildInfo, ScriptRecordsCommitAndDirtyFlagAndFollowsNewCommits) {
  if (sh("git --version") != 0) GTEST_SKIP() << "git is not installed";
  std::string pattern = (fs::path(::testing::TempDir()) / "servelab_build_info_XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  const fs::path tmp = pattern;
  const fs::path header = tmp / "out" / "servelab_build_info.h";

  fs::create_directories(tmp / "plain");
  const std::string plain = build_info_header(tmp / "plain", header);
  EXPECT_NE(plain.find("#define SERVELAB_BUILD_COMMIT \"unknown\""), std::string::npos) << plain;
  EXPECT_NE(plain.find("#define SERVELAB_BUILD_DIRTY 0"), std::string::npos) << plain;

  const fs::path repo = tmp / "repo";
  fs::create_directories(repo);
  const std::string git = "git -C '" + repo.string() + "' -c user.name=t -c user.email=t@t ";
  std::ofstream(repo / "a.cpp") << "int a;\n";
  ASSERT_EQ(sh(git + "init -q && " + git + "add a.cpp && " + git + "commit -qm one"), 0);
  const std::string first = head_of(repo);
  ASSERT_EQ(first.size(), 40u);
  std::string h = build_info_header(repo, header);
  EXPECT_NE(h.find("\"" + first + "\""), std::string::npos) << h;
  EXPECT_NE(h.find("SERVELAB_BUILD_DIRTY 0"), std::string::npos) << h;

  std::ofstream(repo / "a.cpp") << "int a = 1;\n";  // an uncommitted edit
  h = build_info_header(repo, header);
  EXPECT_NE(h.find("\"" + first + "\""), std::string::npos) << h;
  EXPECT_NE(h.find("SERVELAB_BUILD_DIRTY 1"), std::string::npos) << h;

  ASSERT_EQ(sh(git + "commit -qam two"), 0);  // the rebuild after a commit sees the new HEAD
  const std::string second = head_of(repo);
  ASSERT_NE(second, first);
  h = build_info_header(repo, header);
  EXPECT_NE(h.find("\"" + second + "\""), std::string::npos) << h;
  EXPECT_NE(h.find("SERVELAB_BUILD_DIRTY 0"), std::string::npos) << h;

  std::error_code ec;
  fs::remove_all(tmp, ec);
}

TEST(BuildInfo, TheBinaryCarriesItsBuildCommit) {
  const BuildInfo b = build_info();
  EXPECT_TRUE(b.commit == "unknown" || std::regex_match(b.commit, std::regex("[0-9a-f]{40}"))) << b.commit;
  if (b.commit == "unknown") {
    EXPECT_FALSE(b.dirty);
  }
}

}  // namespace
}  // namespace servelab::analysis
