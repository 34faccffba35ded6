// Eq. (3) of Lemma 3.2 — equivalently the left-hand side of eq. (10) with ρ = Σr — written
// exactly as the paper prints it, in s: an oracle independent of the library's t = s − 1 form.
#pragma once

#include <algorithm>
#include <cmath>

namespace cgp::test {

inline double eq3_direct(double rho, double delta, double lambda, double s) {
  double log_term = std::log(2 / (s + 1) / delta);
  double first = log_term > 0 ? s / (s - 1) * 2 * std::sqrt(rho * log_term) : 0.0;
  return std::max(first, s * rho * lambda);
}

// The smallest eq. (3) over a dense logarithmic grid of s − 1 in (0, 2/δ − 2): an upper bound
// on the true minimum over s.
inline double eq3_grid_min(double rho, double delta, double lambda, double ratio = 1.0005) {
  double best = INFINITY;
  double t_max = 2 / delta - 2;
  for (double t = t_max * (1 - 1e-9); t > t_max * 1e-16; t /= ratio)
    best = std::min(best, eq3_direct(rho, delta, lambda, 1 + t));
  return best;
}

}  // namespace cgp::test
