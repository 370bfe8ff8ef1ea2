#pragma once
// ProfiledStepModel's internals shared by its fit (cost_model_fit.cpp) and its pricing
// (cost_model.cpp): the row functions' hat weights and which steps are mixed.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "engine/backend/cost_model.h"

namespace servelab::profiled {

/// Hat-function weights of `rows` over the knots: (index, weight) pairs, rows clamped to the ends.
inline void knot_weights(const std::vector<double>& knots, double rows, size_t& i, double& u) {
  if (rows <= knots.front() || knots.size() == 1) {
    i = 0;
    u = 0.0;
    return;
  }
  if (rows >= knots.back()) {
    i = knots.size() - 2;
    u = 1.0;
    return;
  }
  i = static_cast<size_t>(std::upper_bound(knots.begin(), knots.end(), rows) - knots.begin()) - 1;
  u = (rows - knots[i]) / (knots[i + 1] - knots[i]);
}

/// Prefill rows beside decodes: an eager step whose decodes do not run as in the decode graphs.
inline bool mixed_step(const StepShape& s) { return s.prefill_pairs > 0.0 && s.decode_context > 0.0; }

}  // namespace servelab::profiled
