// Conversions between pure GP, CGP and approximate GP (paper §3, Lemmas 3.1 and 3.2).
// Units: ε is loss per unit distance, ρ per unit distance squared, Λ a distance, all in the
// unit of the component (metres for projected locations). See conversions.md for the proofs.
#pragma once

#include "cgp/common/expected.hpp"

namespace cgp::privacy {

// Lemma 3.1: an (ε, 0, Λ)-GP mechanism is (ε²/2, Λ)-CGP. Returns ρ = ε²/2, rounded up.
Expected<double> cgp_rho_from_pure_gp(double epsilon);

// Lemma 3.2, eq. (3), at one s in (1, 2/δ − 1]:
//   ε(s) = max{ s/(s−1)·2√(ρ·log(2/((s+1)δ))), sρΛ }, rounded up.
// Beyond 2/δ − 1 the logarithm is negative and eq. (3) says nothing; such s is out_of_range.
Expected<double> gp_epsilon_from_cgp_at(double rho, double delta, double lambda, double s);

// Lemma 3.2's closed form, s = 1 + 2√(ρ log(1/δ))/(ρΛ): ε = ρΛ + 2√(ρ log(1/δ)), rounded up.
Expected<double> gp_epsilon_from_cgp_closed_form(double rho, double delta, double lambda);

struct GpEpsilon {
  double epsilon;  // the (ε, δ, Λ)-GP ε, rounded up
  double s;        // the s of eq. (3) it was evaluated at
};

// Lemma 3.2 minimised over s ∈ (1, 2/δ − 1]. Never larger than the closed form.
// ρ > 0 finite, δ ∈ (0, 1), Λ > 0 finite (with Λ = ∞ no finite ε exists).
Expected<GpEpsilon> gp_epsilon_from_cgp(double rho, double delta, double lambda);

}  // namespace cgp::privacy
