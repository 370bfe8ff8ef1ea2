#pragma once
// Philox4x32-10 (Salmon et al., SC'11): a counter-based RNG, one pure function of (key, counter),
// shared verbatim by the GPU sampler and its CPU reference so both draw the same numbers.
// Sampling keys it by the request seed and counts by (vocab chunk, position, sample index).
#include <cstdint>

#include "kernels/step_input.h"  // SERVELAB_HD

namespace servelab::kernels {

struct Philox4 {
  uint32_t v[4];
};

SERVELAB_HD uint32_t philox_mulhi(uint32_t a, uint32_t b) {
  return static_cast<uint32_t>((uint64_t(a) * uint64_t(b)) >> 32);
}

/// Philox4x32 with 10 rounds: four independent 32-bit words for counter c under key k.
SERVELAB_HD Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = philox_mulhi(kM0, c0), lo0 = kM0 * c0;
    const uint32_t hi1 = philox_mulhi(kM1, c2), lo1 = kM1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

/// Uniform in (0, 1): 24 random bits, never 0 or 1, so -log(-log(u)) is finite.
SERVELAB_HD float philox_uniform(uint32_t bits) {
  return (static_cast<float>(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

/// The random word for vocab entry i of a sampled row: counter (i / 4, position, seq_key),
/// key seed. Gumbel noise g = -log(-log(u)) turns argmax(logit / T + g) into a softmax draw.
SERVELAB_HD uint32_t sample_bits(uint64_t seed, uint64_t seq_key, int32_t position, int32_t i) {
  const Philox4 r = philox4x32(static_cast<uint32_t>(i >> 2), static_cast<uint32_t>(position),
                               static_cast<uint32_t>(seq_key), static_cast<uint32_t>(seq_key >> 32),
                               static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return r.v[i & 3];
}

}  // namespace servelab::kernels
