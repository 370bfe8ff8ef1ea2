#pragma once
// A constructed induction model ("copy-tiny"): a two-layer Llama whose weights are SET, not drawn
// or trained, so that greedy decoding continues the text that followed the latest earlier
// occurrence of the last two tokens, and emits something else where that bigram has not occurred.
// It runs as an ordinary checkpoint through the real forward (RMSNorm, rotate-half RoPE, softmax
// attention, SwiGLU), so n-gram speculation's acceptance on prompts with copied spans comes out of
// running the model (docs/speculative-decoding.md, "A model that copies").
//
// Residual stream of width 768, in named subspaces (each token's code is a seeded ±1 vector):
//   E   [0, 128)    the token's code (embedding)
//   P   [128, 256)  the previous token's code           (layer 1, head 0: attention at offset 1)
//   P2  [256, 380)  the token two back, first 124 dims  (layer 1, head 1: attention at offset 2)
//   QB  [380, 504)  bigram code of (previous, current)  (layer 1's FFN: products P[k]·E[π(k)])
//   KB  [504, 628)  bigram code of (two back, previous) (layer 1's FFN: products P2[k]·P[π(k)])
//   OUT [628, 756)  the code of the token to emit       (layer 2, head 0: query QB, key KB, value E;
//                   layer 2's FFN sharpens it so a thinly spread attention copies nothing)
//   bias 767        a constant 1 (gives attention a position-only query and key)
// The LM head scores token t by <code_t, OUT> (copy) plus a weaker fallback <code_t, R·QB> (a fixed
// random function of the last bigram), which decides the token when no bigram matched.
#include <cstdint>
#include <string>

#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace servelab {

/// The preset name of the constructed induction model.
inline constexpr const char* kCopyTinyPreset = "copy-tiny";

/// True for presets whose weights are constructed rather than drawn (copy-tiny).
bool is_constructed_preset(const std::string& name);

/// copy-tiny's shapes: hidden 768, 2 layers, 3 heads of 256 (no GQA), FFN 496, vocabulary 2048,
/// rope_theta 1e8 (many slow RoPE pairs for position-free matching, a few fast ones for offsets),
/// max_position 2048, f32 on disk.
ModelConfig copy_tiny_config();

/// The induction weights for `config` (copy_tiny_config(), its dtype and max_position may differ);
/// the token codes and the fallback map come from `seed`. Throws std::invalid_argument when the
/// shapes are not copy-tiny's.
ModelWeights induction_weights(const ModelConfig& config, uint64_t seed);

/// The weights of a preset: constructed for copy-tiny, ModelWeights::random otherwise.
ModelWeights preset_weights(const std::string& preset_name, const ModelConfig& config, uint64_t seed);

/// Write `weights` as a Hugging Face folder (config.json + model.safetensors, in config.dtype) with
/// our safetensors writer, so every backend loads it as a checkpoint. Throws std::runtime_error on
/// I/O errors.
void write_weights_checkpoint(const ModelWeights& weights, const std::string& dir);

}  // namespace servelab
