#pragma once
// FastRemainder: x % d for a divisor fixed ahead of many remainders, without a division (Lemire,
// Kaser and Kurz, "Faster remainder by direct computation", 2019). A 64-bit division costs tens of
// cycles; the simulator takes one a drawn token (SimBackend) and one a prompt token (the load
// generator's Rng::uniform_ints), hundreds of millions in a run of a million requests.
#include <cstdint>

namespace servelab {

/// m = ceil(2^128 / d) turns x % d into two 64x64 and one 128x64 multiplication: exact for every
/// 64-bit x and every d >= 1.
class FastRemainder {
 public:
  explicit FastRemainder(uint64_t divisor) : d_(divisor), m_(~__uint128_t{0} / divisor + 1) {}
  uint64_t divisor() const { return d_; }
  uint64_t of(uint64_t x) const {
    const __uint128_t low = m_ * x;  // the fraction x / d in 128 bits (mod 2^128)
    const __uint128_t bottom = (static_cast<__uint128_t>(static_cast<uint64_t>(low)) * d_) >> 64;
    return static_cast<uint64_t>(((low >> 64) * d_ + bottom) >> 64);  // floor(fraction · d)
  }

 private:
  uint64_t d_;
  __uint128_t m_;
};

}  // namespace servelab
