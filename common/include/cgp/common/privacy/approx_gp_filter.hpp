// The approximate-GP privacy filter F^{δ,Λ}_{B,∞} of eq. (10) (paper §4.2.3, Theorem 4.5).
//
// Eq. (10) continues iff m(R) := min_{s>1} max(g_δ(s)·√R, sΛR) ≤ B, where R = Σ r_j and
// g_δ(s) = s/(s−1)·2√(log(2/((s+1)δ))). m is continuous and strictly increasing in R, so the set
// of R that continue is an interval [0, R*]. We compute R* once (rounded down) and the filter
// becomes "R ≤ R*": monotone in R by construction and conservative (see approx_gp_filter.md).
#pragma once

#include "cgp/common/expected.hpp"

namespace cgp::privacy {

// R*: the largest total ρ the filter of eq. (10) lets through, rounded down.
// B > 0 finite (an ε per unit distance), δ ∈ (0, 1), Λ > 0 finite.
Expected<double> approx_gp_capacity(double budget_epsilon, double delta, double lambda);

// Eq. (10) for a running total Σr: CONT (true) or HALT (false). Bad parameters HALT.
bool approx_gp_filter_continues(double sum_rho, double budget_epsilon, double delta, double lambda);

}  // namespace cgp::privacy
