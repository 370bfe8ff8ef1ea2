// tests/test_main.cpp gives every test process a private temp folder, so cases that ctest runs
// side by side (one process each) never share a file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace servelab {
namespace {

TEST(TestMain, EveryProcessHasItsOwnTempFolder) {
  const std::string dir = ::testing::TempDir();
  EXPECT_NE(dir, "/tmp/");
  EXPECT_NE(dir.find("servelab_test_"), std::string::npos) << dir;
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;
  // Processes the test starts (the servelab CLI, death tests) inherit it rather than making more.
  const char* owner = std::getenv("SERVELAB_TEST_TMPDIR");
  ASSERT_NE(owner, nullptr);
  EXPECT_EQ(std::string(owner) + "/", dir);
}

}  // namespace
}  // namespace servelab
