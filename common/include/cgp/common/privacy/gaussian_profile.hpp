// The exact (ε, δ) privacy profile of the Gaussian mechanism (Balle & Wang 2018, Thm 8) and the
// (ε, δ, Λ)-GP it gives a CGP filter, tighter than Lemma 3.2. See gaussian_profile.md.
#pragma once

#include "cgp/common/expected.hpp"

namespace cgp::privacy {

// log Φ(x) for the standard normal CDF, accurate to a few ulps from −∞ to +∞.
double log_normal_cdf(double x) noexcept;

// δ(ε) = Φ(μ/2 − ε/μ) − e^ε·Φ(−μ/2 − ε/μ) for a μ-Gaussian-DP pair (μ > 0, ε ≥ 0).
Expected<double> gaussian_delta(double mu, double epsilon);

// The smallest ε ≥ 0 with δ(ε) ≤ δ, returned as an upper bound (rounded up). μ > 0, δ ∈ (0, 1).
Expected<double> gaussian_epsilon(double mu, double delta);

// A filter with Σρ ≤ B over adaptively chosen Gaussian releases is √(2B)·t-GDP for inputs at
// distance t (fully adaptive GDP composition, Smith & Thakurta 2022). Returns an upper bound on
// the per-unit-distance ε = sup_{0<t≤Λ} ε_t(δ)/t with μ = t√(2B): the (ε, δ, Λ)-GP of the user.
Expected<double> gp_epsilon_from_gaussian_budget(double budget_rho, double delta, double lambda);

}  // namespace cgp::privacy
