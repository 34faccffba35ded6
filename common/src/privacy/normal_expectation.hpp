// log E_x[∏_k Φ(α_k·x + β_k)^(n_k)] over x ~ N(0, 1), with an interval that contains the exact
// value, and its derivative in a shift of the β_k. Every bound of 000 (Gaussian Report Noisy Max,
// Gaussian Above Threshold; selection.md) is a difference of two such logarithms.
#pragma once

#include <span>

namespace cgp::privacy::detail {

struct PhiFactor {
  double power = 0;  // n_k ≥ 0
  double alpha = 0;  // α_k
  double beta = 0;   // β_k
  double dbeta = 0;  // ∂β_k/∂Δ, for the derivative
};

struct LogExpectation {
  double lower = 0, upper = 0;  // log E: lower ≤ exact ≤ upper
  // d/dΔ log E (a weighted mean of Σ n_k·∂β_k/∂Δ·λ(u_k), λ = φ/Φ): lower ≤ exact ≤ upper.
  double slope_lower = 0, slope_upper = 0;
  bool ok = false;  // false: the integral could not be bounded (non-finite input)
};

// The integrand's log h(x) = −x²/2 + Σ n_k log Φ(α_k x + β_k) is strictly concave (h″ ≤ −1), so
// the integral is computed around its mode by adaptive Gauss–Kronrod (Boost.Math) on
// [m − L, m + L] with h(m ± L) ≤ h(m) − 80; the tails beyond are bounded by concavity, the
// quadrature by twice Kronrod's error estimate, and the rounding of h by its magnitude.
LogExpectation log_normal_expectation(std::span<const PhiFactor> factors, bool with_slope);

// λ(u) = φ(u)/Φ(u) (the inverse Mills ratio), accurate over the whole real line.
double inverse_mills(double u) noexcept;

}  // namespace cgp::privacy::detail
