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
                                          (1ull << 32) - 1, 1ull << 32, (1ull << 63) - 1, 1ull << 63, ~0ull - 1,
                                          ~0ull};
  std::vector<uint64_t> xs = {0, 1, 2, 31997, 31998, 31999, (1ull << 32) - 1, 1ull << 63, ~0ull - 1, ~0ull};
  uint64_t state = 7;
  for (int i = 0; i < 2000; ++i) xs.push_back(splitmix64_next(state));
  for (const uint64_t d : divisors) {
    const FastRemainder rem(d);
    EXPECT_EQ(rem.divisor(), d);
    for (const uint64_t x : xs) ASSERT_EQ(rem.of(x), x % d) << x << " % " << d;
    // Either side of multiples of d, where a quotient estimated one low shows.
    for (int i = 0; i < 200; ++i) {
      const uint64_t k = splitmix64_next(state) % (~0ull / d) + 1, x = k * d;
      ASSERT_EQ(rem.of(x), 0u) << x << " % " << d;
      ASSERT_EQ(rem.of(x - 1), d - 1) << x - 1 << " % " << d;
    }
  }
}

}  // namespace fast_remainder_test
}  // namespace servelab
