// Above Threshold on the device: the grid, the noise and the decision of a watch.
// The charge is computed here, next to the noise it pays for. Proof: watch.md.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cgp/client/random.hpp"
#include "cgp/client/statistic.hpp"
#include "cgp/common/expected.hpp"
#include "cgp/common/watch.hpp"
#include "int128.hpp"

namespace cgp::client {

// Everything about a Laplace watch that follows from its spec and the device's capacity:
// public, decided before the filter sees the charge.
struct LaplaceWatchPlan {
  int grid_exponent = 0;  // u = 2^grid_exponent, the largest power of two ≤ 2^-24·K/ε
  std::uint64_t threshold_scale = 0;  // S: threshold noise DLap(S) in grid units, S·u ≥ 2K/ε
  std::int64_t threshold_grid = 0;    // the oriented threshold θ' = ±θ in grid units
  double charged_rho = 0;             // device_charge(ε²/2) = (ε(1 + 2^-10))²/2, rounded up
  double grid() const noexcept;       // u
  std::uint64_t query_scale() const noexcept { return 2 * threshold_scale; }  // DLap(2S)
};

// The score as a statistic the device evaluates (borrowing the spec's point or region).
StatisticSpec watch_statistic(const WatchSpec& spec) noexcept;

// The plan, or out_of_range naming epsilon when the charge is below the device's smallest ρ
// (min_rho(capacity): it bounds how many watches and releases a ledger can hold).
Expected<LaplaceWatchPlan> plan_laplace_watch(const WatchSpec& spec, double capacity);

// The oriented score in grid units: round(s/u), s = clamp(φ(x), clamp_lo, clamp_hi), negated
// for at_or_below, so that a crossing is always "score ≥ threshold". The component is clamped
// to ±2^31 first (1-Lipschitz; keeps φ's floating-point error within watch.md's bound).
// Precondition: component has the score's dimension and finite values.
std::int64_t watch_score_grid(const WatchSpec& spec, int grid_exponent,
                              std::span<const double> component, std::vector<double>& scratch);

// The threshold noise ν ~ DLap(S), drawn once at arming and kept in the ledger.
int128 draw_threshold_noise(const LaplaceWatchPlan& plan, RandomBits& bits);

// One tick: whether score + DLap(2S) ≥ θ' + ν (a fresh query noise every tick).
bool laplace_watch_fires(const LaplaceWatchPlan& plan, std::int64_t score_grid,
                         int128 threshold_noise, RandomBits& bits);

// The resolution below which pairs of trajectories are protected as if t_res apart
// (watch.md): 2^10·(u + 2·e)/K with e the floating-point error bound of φ for this dimension.
double watch_resolution(const WatchSpec& spec, int grid_exponent);

}  // namespace cgp::client
