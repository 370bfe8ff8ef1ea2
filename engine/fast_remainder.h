#pragma once
// FastRemainder: x % d for a divisor fixed ahead of many remainders, without a division (Lemire,
// Kaser and Kurz, "Faster remainder by direct computation", 2019). A 64-bit division costs tens of
// cycles; the simulator takes one a drawn token (SimBackend) and one a prompt token (the load
// generator's Rng::uniform_ints), hundreds of millions in a run of a million requests.
#include <cstdint>

namespace servelab {

/// For d < 2^63 (every divisor the simulator takes: a vocabulary, a token range): with
/// m = floor((2^64 - 1) / d), q = floor(x · m / 2^64) is floor(x / d) or one less, so
/// x - q · d is the remainder or the remainder plus d: one 64x64->128 multiplication, one
/// multiplication and a conditional subtraction. Larger divisors: m = ceil(2^128 / d) turns x % d
/// into two 64x64 and one 128x64 multiplication. Exact for every 64-bit x and every d >= 1.
class FastRemainder {
 public:
  explicit FastRemainder(uint64_t divisor)
      : d_(divisor), m64_(~uint64_t{0} / divisor), m_(~__uint128_t{0} / divisor + 1) {}
  uint64_t divisor() const { return d_; }
  uint64_t of(uint64_t x) const {
    if (d_ < (uint64_t{1} << 63)) {
      const auto q = static_cast<uint64_t>((static_cast<__uint128_t>(x) * m64_) >> 64);  // floor(x/d) - {0, 1}
      const uint64_t r = x - q * d_;                                                     // in [0, 2d)
      return r >= d_ ? r - d_ : r;
    }
    const __uint128_t low = m_ * x;  // the fraction x / d in 128 bits (mod 2^128)
    const __uint128_t bottom = (static_cast<__uint128_t>(static_cast<uint64_t>(low)) * d_) >> 64;
    return static_cast<uint64_t>(((low >> 64) * d_ + bottom) >> 64);  // floor(fraction · d)
  }

 private:
  uint64_t d_;
  uint64_t m64_;  ///< floor((2^64 - 1) / d): the quotient's estimate for d < 2^63
  __uint128_t m_;
};

}  // namespace servelab
