// The estimators g and confidence radii h of the valid triples (M, g, h) of Corollaries 6.1
// (point privatization) and 6.2 (distance privatization), paper §6.1 and Definition 5.
//
// After rounds 1..j a user has released v_s = φ(u) + N(0, I/(2ρ_s)) (or u + noise). The
// ρ-weighted mean of the releases is distributed as N(·, I/(2ρ̄_j)) with ρ̄_j = Σ_{s≤j} ρ_s
// (Fact 6.2), so the estimate is within h = λ(d, β)/√(2ρ̄_j) of the truth with probability 1 − β.
// The running mean itself is `Estimates` (elimination.hpp).
#pragma once

#include <cmath>
#include <cstddef>

#include "cgp/common/expected.hpp"

namespace cgp::coordinator {

// Every radius is widened by 2^-16: a device's noise is at least 1/√(2r) and at most 2^-48
// above it, and rounding φ to its grid moves it by ≤ σ·2^-25 (client-sdk privatizer.md); the
// widening covers both, and the rounding of λ. A wider radius only makes elimination more careful.
inline constexpr double kRadiusSlack = 1 + 1.0 / 65536;

// h = λ/√(2ρ̄)·kRadiusSlack, for a λ(d, β) computed once for many users (the elimination's
// inner loop). The one formula for a radius: confidence_radius uses it too.
inline double radius_from_lambda(double lambda, double total_rho) noexcept {
  return lambda / std::sqrt(2 * total_rho) * kRadiusSlack;
}

// h(ρ̄_j, β) = λ(d, β)/√(2ρ̄_j): d = dimension of the release (d for point privatization,
// h₀ of Cor. 6.1; 1 for distance privatization, h₁ of Cor. 6.2).
Expected<double> confidence_radius(std::size_t release_dimension, double beta, double total_rho);

}  // namespace cgp::coordinator
