// Local Gaussian privatization on the device (paper Lemma 3.4 with Z ~ N(0, I/(2ρ))), done
// exactly on a power-of-two grid: φ(x) is rounded to the grid and integer discrete Gaussian
// noise is added. The charge is computed here, next to the noise it pays for (privatizer.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cgp/client/random.hpp"
#include "cgp/client/statistic.hpp"
#include "cgp/common/expected.hpp"

namespace cgp::client {

struct NoisePlan {
  int grid_exponent = 0;          // grid spacing u = 2^grid_exponent, σ/u ∈ [2^24, 2^25)
  std::uint64_t sigma2_grid = 0;  // σ² in grid units: the least integer ≥ K²/(2ρu²)
  double charged_rho = 0;         // privacy::device_charge(ρ)
  double coordinate_limit = 0;    // 2^48·u ≈ 2^24·σ: inputs are clamped to [−limit, limit]
  double grid() const noexcept;   // u
  double sigma() const noexcept;  // √(sigma2_grid)·u ≥ K/√(2ρ): the noise actually added
};

// The plan for a K-Lipschitz statistic asked at ρ. K and ρ finite and > 0.
Expected<NoisePlan> plan_noise(double lipschitz, double rho);

// Releases round(φ/u)·u + Z·u with Z ~ N_Z(0, σ²_grid) per coordinate, into `out` (resized).
// φ must come from inputs clamped to the plan's coordinate_limit; |φ| ≤ 2^54·u per coordinate
// (out_of_range otherwise).
Status privatize(std::span<const double> phi, const NoisePlan& plan, RandomBits& bits,
                 std::vector<double>& out);

// Buffers a thread reuses across releases (no allocation per release once warm).
struct ReleaseScratch {
  std::vector<double> clamped, phi;
};

// One release without budget accounting (the caller admits and commits around it): clamp the
// component to the plan's box, evaluate φ, round to the grid, add exact noise.
// Precondition: check_statistic_input(spec, component) passed.
Status release_statistic(const StatisticSpec& spec, std::span<const double> component,
                         const NoisePlan& plan, RandomBits& bits, ReleaseScratch& scratch,
                         std::vector<double>& out);

}  // namespace cgp::client
