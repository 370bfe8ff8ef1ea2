#pragma once
// Weights for model-based proposers and for model pairs whose agreement is set by construction.
// A self-speculative draft is the target's first L' layers with the target's final norm and LM
// head. A target whose later layers' residual branches are scaled by s (attention output and
// down projections) computes x + s·f(x) there: at s = 0 its first L' layers predict it exactly,
// and as s grows the two disagree more; acceptance then comes out of running both models.
#include "engine/model/residual_scale.h"  // scale_residual_branches: the target side of a built pair
#include "engine/model/weights.h"

namespace servelab {

/// The first n_layers decoder layers of `target` (1 <= n_layers <= target's), its embedding,
/// final norm and LM head: a model of the same vocabulary and width (config.n_layers =
/// n_layers, name "<target>-first<n>"). Throws std::invalid_argument naming the range.
ModelWeights first_layers(const ModelWeights& target, int n_layers);

}  // namespace servelab
