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

/// Uniform draw in [0, 1) fixed by (seed, seq_key, position); 53 random bits.
double uniform_draw(uint64_t seed, uint64_t seq_key, int position);

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

/// Index of the largest logit, lowest index on ties, NaN ignored (0 when all are NaN).
TokenId argmax_token(std::span<const float> logits);

/// logits with every token whose bit is clear in `words` (bit t of words[t / 32]) set to -inf,
/// written into `scratch`; returns the masked row. Throws std::invalid_argument when the mask
/// allows no token (a constraint that can never be met).
std::span<const float> apply_token_mask(std::span<const float> logits, const uint32_t* words, std::vector<float>& scratch);

/// log softmax(logits)[token]: the token's log-probability under the raw logits.
float token_logprob(std::span<const float> logits, TokenId token);

}  // namespace servelab
