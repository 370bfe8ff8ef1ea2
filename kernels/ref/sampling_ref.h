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
#include <vector>

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

/// splitmix64's mix (engine/splitmix64.h), usable on the device.
SERVELAB_HD uint64_t sampling_splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The uniform in [0, 1) keyed by (seed, seq_key, position, stream): splitmix64 chained as the
/// CPU's uniform_draw (engine/backend/sampler.h), 53 bits. Streams: 0 target, 2 residual.
SERVELAB_HD double sampling_uniform(uint64_t seed, uint64_t seq_key, int position, uint64_t stream) {
  uint64_t h = sampling_splitmix(seed);
  h = sampling_splitmix(h ^ seq_key);
  h = sampling_splitmix(h ^ static_cast<uint64_t>(static_cast<uint32_t>(position)));
  if (stream != 0) h = sampling_splitmix(h ^ sampling_splitmix(stream));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

/// Greedy argmax: lowest index among equal maxima, NaN ignored, 0 when every logit is NaN.
int32_t argmax_ref(std::span<const float> logits);

/// apply_token_masks on the host: -inf for every token of row r whose bit is clear in mask
/// mask_index[r] (rows with -1 untouched).
void apply_token_masks_ref(std::span<float> logits, int n_rows, int vocab, std::span<const int32_t> mask_index,
                           std::span<const uint32_t> words, int words_per_row);

/// Samples one token from logits [vocab] with the kernel's algorithm.
int32_t sample_ref(std::span<const float> logits, const SampleParams& p);

/// The distribution sample_ref draws from, over the vocabulary: exp(x / T - max) over the kept
/// tokens (float), divided by their sum (double), zeros elsewhere; one-hot at the argmax when
/// greedy (or every logit NaN / -inf). The kernel's probs_out (kernels/sampling.h).
void sampling_distribution_ref(std::span<const float> logits, const SampleParams& p, std::vector<float>& probs);

/// Rejection sampling of `draft` (drawn from q [vocab]) against p = sampling_distribution_ref, the
/// kernel's algorithm (SampleArgs::draft_dist) and the CPU's verify_draft rule: draft when
/// u * q(x) < p(x) (sampling_uniform stream 0), else the inverse CDF of max(0, p - q) with the
/// draft's entry zeroed at sampling_uniform stream 2; sample_ref where that has no mass; argmax
/// when greedy or every logit is NaN / -inf.
int32_t verify_draft_ref(std::span<const float> logits, const SampleParams& p, int32_t draft, std::span<const float> q);

}  // namespace servelab::kernels
