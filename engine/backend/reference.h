#pragma once
// The plain reference forward: loops, no BLAS, no KV cache, no threads. It recomputes the whole
// sequence from scratch, accumulating in double, and is written apart from the optimized CPU
// backend so that the two can check each other.
#include <span>
#include <vector>

#include "engine/model/weights.h"
#include "engine/request.h"

namespace servelab {

/// Logits of every position: [tokens.size(), vocab], row p predicting token p + 1.
/// Throws std::invalid_argument for an empty sequence or a token outside [0, vocab).
std::vector<float> reference_logits_all(const ModelWeights& weights, std::span<const TokenId> tokens);

/// Logits of the last position: [vocab].
std::vector<float> reference_logits(const ModelWeights& weights, std::span<const TokenId> tokens);

/// Greedy continuation of prompt by n_new tokens (argmax, lowest index on ties), recomputing
/// the whole sequence for each token. O(n²) forwards: for small models in tests.
std::vector<TokenId> reference_greedy(const ModelWeights& weights, std::span<const TokenId> prompt,
                                      int n_new);

}  // namespace servelab
