#pragma once
// Reference for the GPU sampler: the same algorithm, in plain loops, so the kernel can be checked
// token for token. The draw is Gumbel-max over the kept tokens, with Philox noise keyed by
// (seed, seq_key, position): reproducible for a seed, independent of the batch and its order.
//
// Kept set: tokens whose scaled logit x / T is >= the k-th largest (top_k > 0), then >= the
// smallest value of the most-likely prefix whose probability mass reaches top_p (top_p < 1).
// Ties at a threshold are all kept. Masses are summed in 2^-32 fixed point (integers add in any
// order to the same total), so the GPU's parallel sums pick the same thresholds as this loop.
#include <cstdint>
#include <span>

#include "kernels/step_input.h"

namespace servelab::kernels {

/// One row's sampling parameters (the per-row entries of StepInput's sampling arrays).
struct SampleParams {
  float temperature = 0.0f;  ///< 0 = greedy
  int32_t top_k = 0;         ///< 0 = off
  float top_p = 1.0f;        ///< 1 = off
  uint64_t seed = 0;
  uint64_t seq_key = 0;
  int32_t position = 0;
};

/// Order-preserving map float -> uint32 (larger float, larger key); NaN maps to 0 (never kept).
SERVELAB_HD uint32_t order_key(float f) {
#if defined(__CUDA_ARCH__)
  const uint32_t u = __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
#endif
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// Fixed-point weight of a token: exp(x - max) in units of 2^-32 (max token weighs 2^32).
SERVELAB_HD uint64_t fixed_weight(float w) { return static_cast<uint64_t>(static_cast<double>(w) * 4294967296.0); }

/// Greedy argmax: lowest index among equal maxima, NaN ignored, 0 when every logit is NaN.
int32_t argmax_ref(std::span<const float> logits);

/// apply_token_masks on the host: -inf for every token of row r whose bit is clear in mask
/// mask_index[r] (rows with -1 untouched).
void apply_token_masks_ref(std::span<float> logits, int n_rows, int vocab, std::span<const int32_t> mask_index,
                           std::span<const uint32_t> words, int words_per_row);

/// Samples one token from logits [vocab] with the kernel's algorithm.
int32_t sample_ref(std::span<const float> logits, const SampleParams& p);

}  // namespace servelab::kernels
