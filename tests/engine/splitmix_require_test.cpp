// The shared helpers: one splitmix64 (reference values from Vigna's splitmix64.c, seed 1234567)
// and one require() message shape.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "engine/require.h"
#include "engine/splitmix64.h"

namespace servelab {
namespace {

TEST(Splitmix64, MatchesTheReferenceSequence) {
  uint64_t state = 1234567;
  EXPECT_EQ(splitmix64_next(state), 6457827717110365317ull);
  EXPECT_EQ(splitmix64_next(state), 3203168211198807973ull);
  EXPECT_EQ(splitmix64_next(state), 9817491932198370423ull);
  EXPECT_EQ(splitmix64(1234567), 6457827717110365317ull);  // the hash is the generator's first output
  static_assert(splitmix64(0) == 0xe220a8397b1dcdafull);
}

std::string message(bool ok, double got) {
  try {
    require(ok, "batch_size", ">= 1", got);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Require, NamesFieldRuleAndValue) {
  EXPECT_EQ(message(true, -3), "");
  EXPECT_EQ(message(false, -3), "batch_size must be >= 1 (got -3)");
  EXPECT_EQ(message(false, 0.25), "batch_size must be >= 1 (got 0.25)");
  EXPECT_EQ(message(false, 1e300), "batch_size must be >= 1 (got 1e+300)");
}

}  // namespace
}  // namespace servelab
