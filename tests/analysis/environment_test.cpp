#include "analysis/environment.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

namespace servelab::analysis {
namespace {

TEST(Environment, DetectFillsMachineFieldsAndKeepsGivenOnes) {
  const Environment e = detect_environment("sim (cost model)", "abc", "0.1.0");
  EXPECT_EQ(e.device, "sim (cost model)");
  EXPECT_EQ(e.commit, "abc");
  EXPECT_EQ(e.servelab_version, "0.1.0");
  EXPECT_GT(e.n_cores, 0);
  EXPECT_TRUE(std::regex_match(e.date, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"))) << e.date;
  const nlohmann::ordered_json j = e;
  EXPECT_EQ(j.get<Environment>().date, e.date);
}

TEST(Environment, GitCommitIsEmptyOutsideARepository) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "servelab_not_a_repo";
  std::filesystem::create_directories(dir);
  EXPECT_EQ(git_commit((dir / "missing'quote").string()), "");
  const std::string c = git_commit(SERVELAB_SOURCE_DIR);
  if (c.empty()) GTEST_SKIP() << "source tree is not a git checkout (or git is missing)";
  EXPECT_TRUE(std::regex_match(c, std::regex("[0-9a-f]{40}"))) << c;
}

}  // namespace
}  // namespace servelab::analysis
