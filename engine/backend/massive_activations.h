#pragma once
// Massive activations (Sun et al., "Massive Activations in Large Language Models", 2024), synthesized
// into random weights: a few token ids (in trained models BOS and delimiters) drive a few channels of
// every FFN's down-projection input to values `magnitude` times the usual ones, while every other
// token's activations stay as they were. Per-tensor dynamic FP8 scales the whole step by the largest
// value, so one such token in a batch pushes every other row of that step's down projection into
// E4M3's subnormal range; per-token scales confine the damage to the token's own row. That is the
// reason the per-token layout exists, and `servelab quant-check --massive-tokens` measures it.
//
// The construction, per model (every choice seeded):
// - a hidden channel c* that only the massive tokens use: c* of every embedding row is 0, except the
//   massive tokens', which is 30 × the row's norm, and no layer writes c* (row c* of every wo and
//   w_down is 0), so after RMSNorm a massive token's input is ≈ √d · ffn_norm[c*] on c* and a
//   normal token's is exactly 0 there;
// - in every layer, n_channels FFN channels j whose gate and up rows read c* with a weight b such
//   that gate_j = up_j = √magnitude at a massive token: silu(g)·u ≈ magnitude, where a normal
//   token's |silu(g)·u| is O(1) (random weights: gate, up ~ N(0, 1));
// - those channels' w_down columns divided by magnitude, so what they add to the residual stream is
//   of the usual size: the massive values themselves are harmless, only their effect on the
//   quantization scale is not.
#include <cstdint>
#include <vector>

#include "engine/model/weights.h"

namespace servelab {

struct MassiveActivations {
  int n_tokens = 4;          ///< token ids that carry them, >= 1, < vocab
  int n_channels = 2;        ///< FFN channels per layer, in [1, intermediate_size]
  float magnitude = 1e4f;    ///< their value at those tokens, × the usual |silu(gate)·up| (> 1)
  void validate(const ModelConfig& config) const;  ///< throws std::invalid_argument naming the field
};

/// Builds massive activations into `w` (unquantized, untied LM head or tied: only the embedding's
/// c* column changes) and returns the massive token ids, sorted. Throws std::invalid_argument for
/// bad settings or quantized weights.
std::vector<int32_t> add_massive_activations(ModelWeights& w, const MassiveActivations& m, uint64_t seed);

}  // namespace servelab
