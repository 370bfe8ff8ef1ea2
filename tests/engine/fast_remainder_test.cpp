// FastRemainder: the same remainder as %, over divisors from 1 to 2^64 − 1 and numerators at
// the edges of 64 bits and spread between them.
#include "engine/fast_remainder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/splitmix64.h"

namespace servelab {
namespace fast_remainder_test {  // named, not anonymous: a unity batch shares one translation unit

TEST(FastRemainder, EqualsTheDivisionsRemainder) {
  const std::vector<uint64_t> divisors = {1,     2,         3,          7,           31998,      151934, 1ull << 31,
                                          (1ull << 32) - 1, 1ull << 32, 1ull << 63, ~0ull - 1, ~0ull};
  std::vector<uint64_t> xs = {0, 1, 2, 31997, 31998, 31999, (1ull << 32) - 1, 1ull << 63, ~0ull - 1, ~0ull};
  uint64_t state = 7;
  for (int i = 0; i < 2000; ++i) xs.push_back(splitmix64_next(state));
  for (const uint64_t d : divisors) {
    const FastRemainder rem(d);
    EXPECT_EQ(rem.divisor(), d);
    for (const uint64_t x : xs) ASSERT_EQ(rem.of(x), x % d) << x << " % " << d;
  }
}

}  // namespace fast_remainder_test
}  // namespace servelab
