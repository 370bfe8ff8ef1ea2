#pragma once
// splitmix64 (Vigna's reference, after Steele, Lea and Flood): the one 64-bit mix behind every
// seeded hash in servelab (sampling draws, sim tokens, prefix-cache block hashes, random weights,
// load-generator seeds), so two places that mix the same value always agree.
#include <cstdint>

namespace servelab {

/// Adds the golden-ratio increment, then applies the splitmix64 finalizer: a bijective,
/// well-spread 64-bit hash of x.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The generator form: the next output of the splitmix64 sequence at `state` (= splitmix64(state)),
/// advancing state by the increment.
constexpr uint64_t splitmix64_next(uint64_t& state) {
  const uint64_t out = splitmix64(state);
  state += 0x9e3779b97f4a7c15ull;
  return out;
}

}  // namespace servelab
