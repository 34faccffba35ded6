// Privacy profiles (ε, δ) of private selection (seed 002, Koskela, Redberg, Wang) and the
// Brownian noise-reduction composition bound (seed 001, Thm 4), in the corrected forms of
// ../shared/papers/ERRATA.md: 002's closed-form Cor 5.4/5.5 are never used — Thm 5.2, Thm 5.7
// and Cor 5.8 are computed numerically — and 001 Thm 4 carries its drift term V/2. Every ε
// returned is an upper bound and every δ an upper bound (selection_profiles.md).
#pragma once

#include <cstdint>

#include "cgp/common/expected.hpp"

namespace cgp::privacy {

// δ_G(ε; μ) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) rounded up (the exact profile of a Gaussian
// mechanism with ℓ2 sensitivity/σ = μ, Balle & Wang 2018), and the smallest ε ≥ 0 with
// δ_G(ε) ≤ δ rounded up. μ > 0, ε ≥ 0, δ ∈ (0, 1).
Expected<double> gaussian_delta_upper(double mu, double epsilon);
Expected<double> gaussian_epsilon_upper(double mu, double delta);

// Report Noisy Max over `candidates` scores of sensitivity Δ with N(0, σ²) noise (002 Thm 3.2,
// taking the minimum with post-processing of the whole noisy vector, ERRATA 002 item 2):
//   δ(ε) ≤ min(1, m·δ_G(ε; 2Δ/σ), δ_G(ε; √m·Δ/σ))   (Δ/σ in the first when `monotone`).
Expected<double> gaussian_rnm_profile_delta(std::uint64_t candidates, double sensitivity,
                                            double sigma, double epsilon, bool monotone = false);
Expected<double> gaussian_rnm_profile_epsilon(std::uint64_t candidates, double sensitivity,
                                              double sigma, double delta, bool monotone = false);

// How many times private selection runs its base mechanism (002 §5): a random K, and the best
// of the K runs is released.
struct RandomRuns {
  enum class Kind {
    truncated_negative_binomial,  // D_{η,γ} (Thm 5.2); η = 1 is geometric, mean 1/γ
    binomial,                     // Bin(n, p) (Thm 5.7)
    poisson,                      // Poisson(mean) (Cor 5.8)
  };
  Kind kind = Kind::truncated_negative_binomial;
  double eta = 1, gamma = 0.5;  // truncated_negative_binomial: η > −1 (≠ 0 or 0), γ ∈ (0, 1)
  std::uint64_t n = 1;          // binomial
  double p = 0.5;               // binomial: p ∈ (0, 1)
  double mean = 1;              // poisson: > 0

  static RandomRuns truncated_negative_binomial(double eta, double gamma);
  static RandomRuns geometric(double expected_runs);  // η = 1, γ = 1/expected_runs
  static RandomRuns binomial(std::uint64_t n, double p);
  static RandomRuns poisson(double mean);
};
Status validate(const RandomRuns& runs);
// E[K] (the m of 002's bounds).
Expected<double> expected_runs(const RandomRuns& runs);

// (ε, δ) of private selection over a Gaussian base mechanism with μ = Δ/σ: given δ, the
// smallest ε the theorem certifies, its free parameter ε₁ chosen numerically (the theorem
// holds for every ε₁ ≥ 0, so the search changes only how tight it is, never whether it holds).
Expected<double> gaussian_selection_epsilon(const RandomRuns& runs, double mu, double delta);
// Given ε, the δ (rounded up).
Expected<double> gaussian_selection_delta(const RandomRuns& runs, double mu, double epsilon);
// The RDP baseline 002 compares against (its Thm 5.1, Papernot & Steinke 2022) for the truncated
// negative binomial: ε'(α) = αμ²/2 + (η + 1)(1 − 1/α̂)α̂μ²/2 + (η + 1)log(1/γ)/α̂ + log(m)/(α − 1)
// with α̂ = max(1, √(2 log(1/γ))/μ) (its minimiser), converted to (ε, δ) by
// ε = ε'(α) + log(1 − 1/α) − (log δ + log α)/(α − 1) (Canonne, Kamath, Steinke 2020) and
// minimised over α on a grid. A valid but looser bound: kept to show what Thm 5.2 gains.
Expected<double> gaussian_selection_epsilon_rdp(const RandomRuns& runs, double mu, double delta);
// Thm 5.2 for a base mechanism that is (ε₀, δ₀)-DP, at ε₁ = ε₀: returns the ε with δ = m·δ₀.
Expected<double> tnb_selection_epsilon_from_approx_dp(double eta, double gamma, double epsilon0,
                                                      double delta0);

// 001 Thm 4 with the drift term: for Brownian noise-reduction mechanisms of sensitivity 1
// stopped at times t_i, V = Σ 1/t_i, and a mixture parameter γ > 0 fixed in advance,
//   Pr[Σ L_i ≥ V/2 + ψ(V; γ, δ)] ≤ δ,  ψ = √((V + γ)·log((V + γ)/(δ²γ))).
Expected<double> brownian_mixture_boundary(double v, double gamma, double delta);  // ψ, rounded up
Expected<double> brownian_expost_epsilon(double v, double gamma, double delta);    // V/2 + ψ

}  // namespace cgp::privacy
