#include "engine/backend/least_squares.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace servelab {

std::vector<double> weighted_least_squares(const std::vector<std::vector<double>>& a, const std::vector<double>& b,
                                           const std::vector<double>& w, const std::vector<bool>& active) {
  const size_t n_cols = active.size();
  std::vector<size_t> cols;
  for (size_t c = 0; c < n_cols; ++c)
    if (active[c]) cols.push_back(c);
  const size_t k = cols.size();
  std::vector<double> scale(k, 0.0);
  for (size_t j = 0; j < k; ++j)
    for (size_t i = 0; i < a.size(); ++i) scale[j] = std::max(scale[j], std::abs(a[i][cols[j]] * w[i]));
  for (double& s : scale) s = s > 0 ? s : 1.0;
  std::vector<std::vector<double>> m(k, std::vector<double>(k + 1, 0.0));
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t p = 0; p < k; ++p) {
      const double xp = a[i][cols[p]] * w[i] / scale[p];
      if (xp == 0.0) continue;
      for (size_t q = 0; q < k; ++q) m[p][q] += xp * a[i][cols[q]] * w[i] / scale[q];
      m[p][k] += xp * b[i] * w[i];
    }
  }
  for (size_t p = 0; p < k; ++p) m[p][p] += 1e-12;
  for (size_t c = 0; c < k; ++c) {  // Gaussian elimination, partial pivoting
    size_t piv = c;
    for (size_t r = c + 1; r < k; ++r)
      if (std::abs(m[r][c]) > std::abs(m[piv][c])) piv = r;
    std::swap(m[c], m[piv]);
    for (size_t r = 0; r < k; ++r) {
      if (r == c || m[r][c] == 0.0) continue;
      const double f = m[r][c] / m[c][c];
      for (size_t j = c; j <= k; ++j) m[r][j] -= f * m[c][j];
    }
  }
  std::vector<double> x(n_cols, 0.0);
  for (size_t j = 0; j < k; ++j) x[cols[j]] = m[j][k] / m[j][j] / scale[j];
  return x;
}

std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& a, const std::vector<double>& b,
                                              const std::vector<double>& w, std::vector<bool> active) {
  for (;;) {
    std::vector<double> x = weighted_least_squares(a, b, w, active);
    size_t worst = x.size();
    for (size_t c = 0; c < x.size(); ++c)
      if (active[c] && x[c] < 0.0 && (worst == x.size() || x[c] < x[worst])) worst = c;
    if (worst == x.size()) return x;
    active[worst] = false;
  }
}

}  // namespace servelab
