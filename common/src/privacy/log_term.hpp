// The logarithm log(2/((s+1)δ)) shared by eq. (3) and eq. (10), with s = 1 + t.
#pragma once

#include <cfloat>
#include <cmath>

namespace cgp::privacy {

// An upper bound on log(2/((2+t)δ)) = −log1p(t/2) − log δ. Near s = 2/δ − 1 the two terms
// cancel and the difference carries an absolute error of up to 2.5 ulp of the larger term;
// adding that error bound keeps g_δ(s) and eq. (3)'s first term on the user's side (a larger
// log term means a larger ε and a smaller capacity).
inline double log_term_upper(double delta, double t) {
  double a = std::log1p(t / 2);
  double b = std::log(delta);
  return -a - b + 4 * DBL_EPSILON * (std::fabs(a) + std::fabs(b));
}

}  // namespace cgp::privacy
