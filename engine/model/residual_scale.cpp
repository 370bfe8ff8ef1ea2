#include "engine/model/residual_scale.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/model/weights.h"

namespace servelab {

void ResidualScale::validate(const char* what) const {
  if (from_layer < 0)
    throw std::invalid_argument(std::string(what) + ".from_layer must be >= 0 (got " + std::to_string(from_layer) + ")");
  if (!std::isfinite(scale))
    throw std::invalid_argument(std::string(what) + ".scale must be finite (got " + std::to_string(scale) + ")");
}

void scale_residual_branches(ModelWeights& weights, int from_layer, float scale) {
  const int n = static_cast<int>(weights.layers.size());
  if (from_layer < 0 || from_layer > n)
    throw std::invalid_argument("scale_residual_branches: from_layer must be in [0, " + std::to_string(n) + "] (got " +
                                std::to_string(from_layer) + ")");
  if (!std::isfinite(scale))
    throw std::invalid_argument("scale_residual_branches: scale must be finite (got " + std::to_string(scale) + ")");
  for (int l = from_layer; l < n; ++l) {
    for (float& x : weights.layers[size_t(l)].wo) x *= scale;
    for (float& x : weights.layers[size_t(l)].w_down) x *= scale;
  }
}

void apply_residual_scale(ModelWeights& weights, const std::optional<ResidualScale>& r) {
  if (!r) return;
  r->validate();
  scale_residual_branches(weights, std::min(r->from_layer, static_cast<int>(weights.layers.size())), r->scale);
}

}  // namespace servelab
