// Local Gaussian privatization on the device (paper Lemma 3.4 with Z ~ N(0, I/(2ρ))), done
// exactly on a power-of-two grid: φ(x) is rounded to the grid and integer discrete Gaussian
// noise is added. The charge is computed here, next to the noise it pays for (privatizer.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cgp/client/random.hpp"
#include "cgp/client/statistic.hpp"
#include "cgp/common/expected.hpp"

namespace cgp::client {

struct NoisePlan {
  int grid_exponent = 0;               // grid spacing u = 2^grid_exponent (see plan_noise)
  std::uint64_t sigma2_grid = 0;       // σ² in grid units: the least integer ≥ K²/(2ρu²)
  double charged_rho = 0;              // privacy::device_charge(ρ)
  double coordinate_limit = 0;         // 2^48·u: inputs are clamped to [−limit, limit]
  double grid() const noexcept;        // u
  double grid_scale() const noexcept;  // 1/u = 2^-grid_exponent, exactly
  double sigma() const noexcept;  // √(sigma2_grid)·u ≥ K/√(2ρ): the noise actually added
};

// The smallest ρ a device with this capacity answers: capacity·2^-18. It bounds the number of
// releases and keeps σ²/u² within the exact sampler's range (privatizer.md).
double min_rho(double capacity) noexcept;

// The distance below which pairs of inputs are protected as if they were t_res apart
// (privatizer.md, "What it guarantees"), for a statistic of dimension `output_dimension`
// evaluated with floating-point error `float_error_grid_units` (0 for location).
double resolution(double capacity, std::size_t output_dimension, double float_error_grid_units);

// The plan for a K-Lipschitz statistic asked at ρ on a device whose filter lets `capacity`
// through in total. K, ρ, capacity finite and > 0; ρ ≥ min_rho(capacity) (out_of_range).
// The grid is u ≤ 2^-24·σ and u ≤ 2^-21·σ_cap, where σ_cap = K/√(2·capacity) is the noise of
// a release that spends the whole capacity: so every release's rounding slack is paid by its
// own charge at the same resolution (privatizer.md).
Expected<NoisePlan> plan_noise(double lipschitz, double rho, double capacity);

// plan_noise with its work that depends on (K, capacity) only done once: plan(ρ) returns
// exactly what plan_noise(K, ρ, capacity) returns, plans and errors alike (plan_noise is
// create then plan). For callers that plan many ρ on one device or fleet (the simulated
// fleet: Alg. 3 asks thousands of distinct ρ a round).
class NoisePlanner {
 public:
  // Fails as plan_noise does for a bad K or capacity (K, ρ, capacity checked in that order
  // there: plan_noise checks ρ before calling this).
  static Expected<NoisePlanner> create(double lipschitz, double capacity);
  Expected<NoisePlan> plan(double rho) const;

 private:
  NoisePlanner() = default;
  double lipschitz_ = 0, capacity_ = 0, min_rho_ = 0;
  bool capacity_noise_ok_ = false;  // σ_cap = K/√(2·capacity) finite and > 0
  std::int64_t k_mantissa_ = 0;     // K = k_mantissa·2^k_exponent exactly
  int k_exponent_ = 0;
  int capacity_grid_ = 0;  // capacity_grid_exponent(K, capacity): u ≤ 2^-21·σ_cap
};

// plan_noise for this statistic (K from its kind, never from the wire), and the check that the
// request's own coordinates lie inside the plan's box: every reason to reject a request after
// it is parsed, decided on public data before the filter sees it. Device and SimulatedFleet
// both admit through this one function.
Expected<NoisePlan> plan_release(const StatisticSpec& spec, double rho, double capacity);
// plan_release's second check, for callers that keep plan_noise's plans across requests (the
// simulated fleet): whether the plan's box holds the request's public coordinates.
inline bool plan_covers(const NoisePlan& plan, double public_extent) noexcept {
  return public_extent <= plan.coordinate_limit;
}

// Releases round(φ'/u)·u + Z·u with Z ~ N_Z(0, σ²_grid) per coordinate, into `out` (resized),
// where φ' is φ clamped to ±2^62·u (1-Lipschitz: part of the statistic, never a rejection).
// Fails only for a plan that plan_noise did not make.
Status privatize(std::span<const double> phi, const NoisePlan& plan, RandomBits& bits,
                 std::vector<double>& out);

// Buffers a thread reuses across releases (no allocation per release once warm).
struct ReleaseScratch {
  std::vector<double> clamped, phi;
};

// What a release adds noise to: the component clamped to the plan's box (and, for distances,
// to ±2·kMaxCoordinate), then φ; a view into `scratch`. Same precondition as release_statistic.
std::span<const double> release_input(const StatisticSpec& spec, std::span<const double> component,
                                      const NoisePlan& plan, ReleaseScratch& scratch);

// The box a release clamps its component to (release_input): ±coordinate_limit for location,
// and for distances also ±2·kMaxCoordinate.
// Clamping to the grid's box is 1-Lipschitz (a projection onto a convex set) and keeps the
// floating-point error of φ far below the grid (privatizer.md). Distances to public coordinates
// (|·| ≤ kMaxCoordinate) are also clamped to twice that box: no square can overflow and the
// evaluation error stays within privatizer.md's bound.
inline double input_limit(const StatisticSpec& spec, const NoisePlan& plan) noexcept {
  return spec.kind == StatisticKind::location
             ? plan.coordinate_limit
             : std::min(plan.coordinate_limit, 2 * geometry::kMaxCoordinate);
}

// privatize with the noise supplied as standard normals z (one per value): out[i] =
// round(φ'_i/u)·u + round(σ_grid·z_i)·u, the device's clamp and grid with a rounded continuous
// Gaussian in place of the exact discrete one. φ may hold the values of many releases made
// under the same plan (phi, z and out of equal size; only the common length is written). For
// simulations only (cgpkit::simulation's fast noise): the caller's z need no secrecy there, and at
// σ_grid ≥ 2^24 grid units the two laws are indistinguishable in any experiment.
void privatize_with_normals(std::span<const double> phi, const NoisePlan& plan,
                            std::span<const double> z, std::span<double> out) noexcept;

// One release without budget accounting (the caller admits and commits around it): clamp the
// component to the plan's box (and, for distances, to ±2·kMaxCoordinate), evaluate φ, round
// to the grid, add exact noise. Its outcome depends on public data only: once a request is
// admitted, nothing about the user's component can turn it into a rejection.
// Precondition: check_statistic_input(spec, component) passed and the plan came from plan_noise.
Status release_statistic(const StatisticSpec& spec, std::span<const double> component,
                         const NoisePlan& plan, RandomBits& bits, ReleaseScratch& scratch,
                         std::vector<double>& out);

}  // namespace cgp::client
