#pragma once
// Synthesized weights whose later layers contribute little: a model's layers from `from_layer` on
// add `scale` × what their attention and FFN compute to the residual stream (their attention
// output and down projections multiplied by scale). At scale 0 the first `from_layer` layers and
// the LM head predict the model exactly; as scale grows they disagree more. Speculative decoding
// uses it to build a target whose own early layers (`self`) or a smaller draft agree with it at a
// rate set by construction, while both models still run in full (docs/speculative-decoding.md).
#include <optional>

namespace servelab {

struct ModelWeights;

struct ResidualScale {
  int from_layer = 0;   ///< first scaled layer, >= 0 (at or past the model's layers: nothing scaled)
  float scale = 1.0f;   ///< finite
  /// Throws std::invalid_argument naming the field (`what` prefixes it, e.g. "model.residual_scale").
  void validate(const char* what = "residual_scale") const;
  bool operator==(const ResidualScale&) const = default;
};

/// Multiplies wo and w_down of layers [from_layer, n_layers) by scale. Throws
/// std::invalid_argument for from_layer outside [0, n_layers] or a scale that is not finite.
void scale_residual_branches(ModelWeights& weights, int from_layer, float scale);
/// scale_residual_branches for `r` when set, its from_layer clamped to the model's layers (a
/// self-speculative draft of the first L' layers is scaled where the target is, if anywhere).
void apply_residual_scale(ModelWeights& weights, const std::optional<ResidualScale>& r);

}  // namespace servelab
