#pragma once
// Sampling on the GPU: one block per sampled row reads its fp32 logits and writes one token id.
// Same algorithm as kernels/ref/sampling_ref.h (Gumbel-max with Philox noise keyed by seed,
// seq_key and position; top-k and top-p thresholds by radix selection, masses in fixed point).
#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::kernels {


/// Device arrays of n_rows entries each (StepInput's sampling arrays after upload).
struct SampleArgs {
  const float* logits = nullptr;  ///< [n_rows, vocab]
  int n_rows = 0;
  int vocab = 0;
  const float* temperature = nullptr;
  const int32_t* top_k = nullptr;
  const float* top_p = nullptr;
  const uint64_t* seed = nullptr;
  const uint64_t* seq_key = nullptr;
  const int32_t* position = nullptr;
  int32_t* tokens = nullptr;      ///< [n_rows] output: the only thing copied back to the host
  /// Speculative rejection sampling (optional; null = none): a row with draft_dist[r] = d >= 0
  /// (and not greedy) verifies draft x = draft_token[r], drawn from q = draft_probs[d * vocab ..):
  /// with p the distribution this kernel samples (softmax of the kept tokens, see
  /// sampling_distribution_ref), it yields x when u * q(x) < p(x) (u: sampling_uniform, kernels/ref/
  /// sampling_ref.h, at the target stream), else a token drawn by inverse CDF from max(0, p - q) without x (the residual
  /// stream); where that residual has no mass (p = q up to rounding), the ordinary draw. The CPU's
  /// verify_draft (engine/backend/sampler.h) rule, keys and arithmetic, so the two agree draw for
  /// draw on the same p and q (up to rounding at a boundary: summation order).
  const int32_t* draft_token = nullptr;
  const int32_t* draft_dist = nullptr;
  const float* draft_probs = nullptr;
  /// Optional [n_rows, vocab] output: the distribution each row's draw samples (p above; one-hot
  /// at the argmax when greedy): what a draft model hands the target as q.
  float* probs_out = nullptr;
};



void sample_tokens(const SampleArgs& a, cudaStream_t stream);

/// Structured output: logits[r, t] = -inf for every token t whose bit is clear in mask
/// mask_index[r] (bit t of words[mask_index[r] * words_per_row + t / 32]); rows with
/// mask_index -1 are left alone. Reference: apply_token_masks_ref (kernels/ref/sampling_ref.h).
void apply_token_masks(float* logits, int n_rows, int vocab, const int32_t* mask_index, const uint32_t* words,
                       int words_per_row, cudaStream_t stream);

}  // namespace servelab::kernels
