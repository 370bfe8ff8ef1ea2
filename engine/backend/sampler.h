#pragma once
// Token sampling from one row of logits: greedy, temperature, top-k, top-p. Every random draw is
// a pure function of (sampling.seed, seq_key, position), so a sequence samples the same tokens
// whatever batch it runs in and in whatever order the batch lists it.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/splitmix64.h"

namespace servelab {

/// Independent streams of uniforms at one (seed, seq_key, position): the target's draw (0, also
/// the acceptance test of a draft), a draft model's own draw, and the residual draw after a
/// rejected draft.
inline constexpr uint64_t kStreamTarget = 0, kStreamDraft = 1, kStreamResidual = 2;

/// Uniform draw in [0, 1) fixed by (seed, seq_key, position, stream); 53 random bits.
double uniform_draw(uint64_t seed, uint64_t seq_key, int position, uint64_t stream = kStreamTarget);

/// Picks the next token from logits [vocab].
/// - temperature == 0: greedy argmax (lowest index on ties; NaN logits never win).
/// - otherwise softmax(logits / temperature), cut to the top_k most likely (top_k > 0), then to
///   the smallest most-likely prefix whose probability reaches top_p (top_p < 1; never empty),
///   renormalized, and drawn with uniform_draw(sampling.seed, seq_key, position).
/// seq_key is the sequence's sample index within its request; position is the index the sampled
/// token will take in the sequence. ignore_eos and max_tokens are the engine's business.
/// Throws std::invalid_argument on empty logits, temperature < 0, top_k < 0 or top_p outside (0, 1].
TokenId sample_token(std::span<const float> logits, const SamplingParams& sampling, uint64_t seq_key,
                     int position);

/// The distribution sample_token draws from, over the whole vocabulary: softmax(logits / T) cut
/// to top_k and top_p and renormalized (zeros elsewhere); one-hot at the argmax when greedy.
void sampling_distribution(std::span<const float> logits, const SamplingParams& sampling, std::vector<float>& probs);

/// Inverse CDF of probs (nonnegative, any total > 0) at u in [0, 1): the first token whose
/// cumulative mass passes u * total. Throws std::invalid_argument without mass.
TokenId draw_from(std::span<const float> probs, double u);

/// Speculative rejection sampling (Leviathan et al. 2023, Algorithm 1) for one draft position:
/// `draft` was drawn from q (the proposer's distribution at this position, [vocab]); p is
/// sampling_distribution(logits, sampling). Returns `draft` with probability min(1, p(x) / q(x))
/// (uniform_draw at the target stream), else a token drawn from norm(max(0, p - q)) (the residual
/// stream), which is never `draft`. Whatever q is, the result is distributed as p. Greedy: the
/// argmax, so the draft is accepted exactly when it is the argmax.
TokenId verify_draft(std::span<const float> logits, const SamplingParams& sampling, uint64_t seq_key, int position,
                     TokenId draft, std::span<const float> q);

/// Index of the largest logit, lowest index on ties, NaN ignored (0 when all are NaN).
TokenId argmax_token(std::span<const float> logits);

/// logits with every token whose bit is clear in `words` (bit t of words[t / 32]) set to -inf,
/// written into `scratch`; returns the masked row. Throws std::invalid_argument when the mask
/// allows no token (a constraint that can never be met).
std::span<const float> apply_token_mask(std::span<const float> logits, const uint32_t* words, std::vector<float>& scratch);

/// log softmax(logits)[token]: the token's log-probability under the raw logits.
float token_logprob(std::span<const float> logits, TokenId token);

}  // namespace servelab
