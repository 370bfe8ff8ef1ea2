#include "engine/spec/draft_weights.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace servelab {

ModelWeights first_layers(const ModelWeights& target, int n_layers) {
  const int have = static_cast<int>(target.layers.size());
  if (n_layers < 1 || n_layers > have)
    throw std::invalid_argument("self-speculation: num_layers must be in [1, " + std::to_string(have) + "] for " +
                                target.config.name + " (got " + std::to_string(n_layers) + ")");
  ModelWeights w;
  w.config = target.config;
  w.config.n_layers = n_layers;
  w.config.name = target.config.name + "-first" + std::to_string(n_layers);
  w.embedding = target.embedding;
  w.layers.assign(target.layers.begin(), target.layers.begin() + n_layers);
  w.final_norm = target.final_norm;
  w.lm_head = target.lm_head;
  return w;
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

}  // namespace servelab
