#include "engine/backend/massive_activations.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/splitmix64.h"

namespace servelab {
namespace massive_activations_detail {  // named: the library may be compiled as unity batches

/// k distinct values of [0, n), seeded (a partial Fisher-Yates shuffle).
std::vector<int> pick_distinct(int n, int k, uint64_t& state) {
  std::vector<int> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  for (int i = 0; i < k; ++i) std::swap(all[size_t(i)], all[size_t(i) + splitmix64_next(state) % uint64_t(n - i)]);
  all.resize(size_t(k));
  return all;
}

}  // namespace massive_activations_detail

void MassiveActivations::validate(const ModelConfig& c) const {
  if (n_tokens < 1 || n_tokens >= c.vocab_size)
    throw std::invalid_argument("massive tokens must be in [1, vocab_size) = [1, " + std::to_string(c.vocab_size) +
                                ") (got " + std::to_string(n_tokens) + ")");
  if (n_channels < 1 || n_channels > c.intermediate_size)
    throw std::invalid_argument("massive channels must be in [1, intermediate_size] = [1, " +
                                std::to_string(c.intermediate_size) + "] (got " + std::to_string(n_channels) + ")");
  if (!(magnitude > 1.0f) || !std::isfinite(magnitude))
    throw std::invalid_argument("massive magnitude must be a finite number > 1 (got " + std::to_string(magnitude) + ")");
}

std::vector<int32_t> add_massive_activations(ModelWeights& w, const MassiveActivations& m, uint64_t seed) {
  using massive_activations_detail::pick_distinct;
  const ModelConfig& c = w.config;
  m.validate(c);
  if (w.quant.quantized()) throw std::invalid_argument("massive activations are built into unquantized weights");
  const int d = c.hidden_size, ffn = c.intermediate_size, hd = c.n_heads * c.head_dim();
  uint64_t state = seed ^ 0x3a55e7ull;
  const int cstar = pick_distinct(d, 1, state)[0];
  std::vector<int> tokens = pick_distinct(c.vocab_size, m.n_tokens, state);
  std::sort(tokens.begin(), tokens.end());

  // c* is the massive tokens' alone: 0 in every other embedding row, 30 × the row's norm in theirs.
  for (int t = 0; t < c.vocab_size; ++t) w.embedding[size_t(t) * d + cstar] = 0.0f;
  for (int t : tokens) {
    float* row = w.embedding.data() + size_t(t) * d;
    const double norm = std::sqrt(std::inner_product(row, row + d, row, 0.0));
    row[cstar] = static_cast<float>(30.0 * norm);
  }
  const float gate = std::sqrt(m.magnitude);  // gate_j = up_j at a massive token
  for (LayerWeights& l : w.layers) {
    std::fill_n(l.wo.begin() + ptrdiff_t(cstar) * hd, hd, 0.0f);  // no layer writes c*
    std::fill_n(l.w_down.begin() + ptrdiff_t(cstar) * ffn, ffn, 0.0f);
    // A massive token's normed input on c*: ≈ √d (its residual is all c*) × the norm's weight.
    const float x_cstar = std::sqrt(float(d)) * l.ffn_norm[size_t(cstar)];
    if (!(std::fabs(x_cstar) > 0.0f)) throw std::invalid_argument("massive activations: ffn_norm is 0 on the chosen channel");
    for (int j : pick_distinct(ffn, m.n_channels, state)) {
      l.w_gate[size_t(j) * d + cstar] = gate / x_cstar;
      l.w_up[size_t(j) * d + cstar] = gate / x_cstar;
      for (int i = 0; i < d; ++i) l.w_down[size_t(i) * ffn + j] /= m.magnitude;
    }
  }
  return {tokens.begin(), tokens.end()};
}

}  // namespace servelab
