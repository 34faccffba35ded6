// The categorization threshold η(γ) of Appendix B for distance privatization of range counts
// over an l × w rectangle: count u when the noisy Proj_Γ(u) < η(γ) ≤ 0 instead of < 0, which
// balances the band just outside ∂Γ (more area) against the band just inside.
#pragma once

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"

namespace cgp::geometry {

// η(γ) = −aγ for a rectangle of side lengths `length` and `width`; γ, length, width > 0 finite.
// The paper sets γ = 1/√(2ρ_i), the noise scale of user i.
Expected<double> rectangle_threshold_shift(double gamma, double length, double width);

// The same for a 2-D Box; a box of another dimension is a dimension_mismatch.
Expected<double> rectangle_threshold_shift(double gamma, const Box& box);

}  // namespace cgp::geometry
