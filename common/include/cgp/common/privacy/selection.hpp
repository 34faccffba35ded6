// Pure bounds of selection mechanisms with Gaussian noise (seed 000, Lebensold, Precup, Balle),
// in the corrected forms of ../shared/papers/ERRATA.md (000 items 2–3): ε is the logarithm of
// a probability ratio, and Above Threshold uses the proof's form (Lemma 18, eqs. 36–38), never
// Thm 10 or Thm 17 as printed. Every value is an upper bound: quadrature error, tails and
// rounding are bounded and added before the result is rounded up (selection.md).
//
// Queries take values in a public bounded range [lo, hi] and have sensitivity Δ. For a
// K-Lipschitz statistic of a location at distance t, Δ = K·t; the bounds are concave in Δ with
// ε(0) = 0, so K·ε′(0) — the per-unit slope — bounds ε(K·t)/t at every distance.
#pragma once

#include <cstdint>

#include "cgp/common/expected.hpp"

namespace cgp::privacy {

// Report Noisy Max over `candidates` ≥ 2 queries in a range of width `range_width`, noise
// N(0, σ²): the pure ε of its output (000 Thm 8/12, log form, worst case of Lemma 13/16):
//   ε = log E_z[Φ(z − (c − 2Δ)/σ)^(d−1)] − log E_z[Φ(z − c/σ)^(d−1)],  c = range_width.
// 0 ≤ Δ ≤ c. Errors name candidates, sensitivity, sigma or range_width.
Expected<double> gaussian_rnm_epsilon(std::uint64_t candidates, double sensitivity, double sigma,
                                      double range_width);
// Its per-unit slope ε′(0) (an upper bound): ε(Δ) ≤ slope·Δ for every Δ.
Expected<double> gaussian_rnm_slope(std::uint64_t candidates, double sigma, double range_width);

// Gaussian Above Threshold (000 Alg. 3): threshold noise X ~ N(0, σ_X²) drawn once, query noise
// Z_t ~ N(0, σ_Z²) per tick; alert at the first t with q_t + Z_t ≥ threshold + X. (A watch that
// fires at or below a threshold is the same mechanism on −score.)
struct GaussianAboveThreshold {
  double sigma_threshold = 0;         // σ_X > 0
  double sigma_query = 0;             // σ_Z > 0 (000 §4.1: √3·σ_X)
  double range_lo = 0, range_hi = 0;  // every query's values, lo < hi
  double threshold = 0;               // in [lo, hi]
};
// Validates the parameters; errors name sigma_threshold, sigma_query, range or threshold.
Status validate(const GaussianAboveThreshold& at);

// ε_post of the output "alert at tick t" (⊥^(t−1)⊤), t ≥ 1, at sensitivity Δ ∈ [0, hi − lo]:
//   log E_x[Φ(u_⊥)^(t−1) Φ(u_⊤)] at Δ minus the same at 0, x ~ N(0, 1),
//   u_⊥ = (σ_X x + threshold − hi + Δ)/σ_Z,  u_⊤ = (−σ_X x − threshold + lo + Δ)/σ_Z.
Expected<double> gaussian_at_alert_epsilon(const GaussianAboveThreshold& at, std::uint64_t tick,
                                           double sensitivity);
// ε_post of "silent through T ticks" (⊥^T): log E_x[Φ(u_⊥)^T] at Δ minus the same at 0.
Expected<double> gaussian_at_silent_epsilon(const GaussianAboveThreshold& at, std::uint64_t ticks,
                                            double sensitivity);
// Per-unit slopes at Δ = 0 of the two (upper bounds).
Expected<double> gaussian_at_alert_slope(const GaussianAboveThreshold& at, std::uint64_t tick);
Expected<double> gaussian_at_silent_slope(const GaussianAboveThreshold& at, std::uint64_t ticks);
// The largest per-unit slope of any output within `horizon` ticks: max over t ≤ horizon of the
// alert and silent slopes (a pure per-unit bound for the whole watch). O(horizon) integrals;
// horizon ≤ 10^6.
Expected<double> gaussian_at_worst_slope(const GaussianAboveThreshold& at, std::uint64_t horizon);

}  // namespace cgp::privacy
