// Proj_Γ of eq. (11): −dist(u, ∂Γ) inside Γ, +dist(u, ∂Γ) outside, 0 on ∂Γ. 1-Lipschitz
// (Lemma 6.3), so it can be privatized with K = 1. And len_p(u) = ‖u − p‖ (§6.3, §6.4).
#pragma once

#include <span>

#include "cgp/common/expected.hpp"
#include "cgp/common/geometry/region.hpp"

namespace cgp::geometry {

// Unchecked: the caller guarantees point.size() == dimension(region) and finite coordinates.
// For hot loops; no allocation.
double signed_distance(const Box& box, std::span<const double> point) noexcept;
double signed_distance(const Ball& ball, std::span<const double> point) noexcept;
double signed_distance(const Polygon& polygon, std::span<const double> point) noexcept;
double signed_distance(const Region& region, std::span<const double> point) noexcept;

// Checked: dimension_mismatch or not_finite for a bad point.
Expected<double> checked_signed_distance(const Region& region, std::span<const double> point);

// u ∈ Γ in the sense of range counting: Proj_Γ(u) < 0 (the boundary counts as outside).
inline bool inside(const Region& region, std::span<const double> point) noexcept {
  return signed_distance(region, point) < 0;
}

// len_p(u) = ‖u − p‖. Unchecked: equal sizes.
double euclidean_distance(std::span<const double> u, std::span<const double> p) noexcept;

// Many points at once, for loops over users: out[i] = signed_distance(region, x_i) and
// out[i] = euclidean_distance(x_i, p), where x_i = points[i·d, (i+1)·d) with d the region's
// (p's) dimension. One dispatch on the region's kind per call; the same arithmetic, so the
// same bits, as one point at a time. In 2-D, x86-64 builds take whole groups of four points
// through vector code (AVX2 where the CPU has it, else SSE2) and the rest, such as a device's
// one point, one at a time.
void signed_distances(const Region& region, const double* points, std::size_t count,
                      double* out) noexcept;
void euclidean_distances(std::span<const double> p, const double* points, std::size_t count,
                         double* out) noexcept;
Expected<double> checked_euclidean_distance(std::span<const double> u, std::span<const double> p);

// How many of the points are inside(region, x_i), for counting (ground truth, a coordinator's
// estimate); not for devices (a box's count takes no square root, so its time depends on the
// points). A box's points are tested as lo < x < hi in every coordinate: exactly Proj_Γ < 0
// (signed_distance.md, "Counting").
std::size_t count_inside(const Region& region, const double* points, std::size_t count) noexcept;

namespace detail {
// For tests: the batches' vector code keeps to SSE2 even where the CPU has AVX2 (true), or
// picks by the CPU again (false).
void use_baseline_vectors(bool baseline) noexcept;
}  // namespace detail

}  // namespace cgp::geometry
