#include "engine/spec/draft_weights.h"

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

}  // namespace servelab
