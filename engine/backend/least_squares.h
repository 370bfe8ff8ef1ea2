#pragma once
// Weighted linear least squares over a subset of columns, by the normal equations: the profile
// fits (engine/backend/cost_model_fit.cpp's step model, sim_lora.cpp's LoRA terms) share it.
#include <vector>

namespace servelab {

/// Solves min ‖W(Ax − b)‖ over the columns in `active` (W = diag(w)); inactive columns get 0.
/// Columns are scaled to unit max and a 1e-12 ridge is added, so columns the rows cannot tell
/// apart get the least-norm split instead of a singular system.
std::vector<double> weighted_least_squares(const std::vector<std::vector<double>>& a, const std::vector<double>& b,
                                           const std::vector<double>& w, const std::vector<bool>& active);

/// The same with every coefficient >= 0: the most negative column is dropped and the rest
/// refitted until none is negative (the few-column fits here need no full NNLS).
std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& a, const std::vector<double>& b,
                                              const std::vector<double>& w, std::vector<bool> active);

}  // namespace servelab
