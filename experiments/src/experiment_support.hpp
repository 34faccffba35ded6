// What the experiments share: query squares, query centres, seeds and fleets (internal to
// cgp_experiments).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "cgp/common/device_config.hpp"
#include "cgp/common/geometry/region.hpp"
#include "cgp/experiments/dataset.hpp"
#include "cgp/experiments/experiment.hpp"
#include "cgp/simulation/simulated_fleet.hpp"
#include "sharded_truth.hpp"

namespace cgp::experiments {

inline geometry::Region square_around(const std::array<double, 2>& c, double side) {
  double lo[2] = {c[0] - side / 2, c[1] - side / 2}, hi[2] = {c[0] + side / 2, c[1] + side / 2};
  return *geometry::Box::create(lo, hi);
}

// Query centres (§7): uniform over the central 100 km × 100 km of the data, or over the central
// half of its extent when that is smaller; --queries overrides.
// accept: drawn centres failing it are redrawn (at most 1000 times each); --queries are kept.
template <class Accept>
std::vector<std::array<double, 2>> centres_for(const Dataset& data, std::size_t count,
                                               const Common& common, Accept&& accept) {
  if (!common.centres.empty()) {
    std::vector<std::array<double, 2>> out(count);
    for (std::size_t i = 0; i < count; ++i) out[i] = common.centres[i % common.centres.size()];
    return out;
  }
  const auto bounds = global_bounds(data, shard_of(data, common.ranks));
  const double lo[2] = {bounds[0], bounds[1]}, hi[2] = {bounds[2], bounds[3]};
  std::mt19937_64 rng(common.seed ^ 0xc3a5c85c97cb3127ULL);
  std::vector<std::array<double, 2>> out(count);
  std::uniform_real_distribution<double> axis[2];
  for (int a = 0; a < 2; ++a) {
    const double mid = (lo[a] + hi[a]) / 2, half = std::min(50000.0, (hi[a] - lo[a]) / 4);
    axis[a] = std::uniform_real_distribution<double>(mid - half, mid + half);
  }
  for (auto& c : out) {
    int tries = 0;
    do {
      c = {axis[0](rng), axis[1](rng)};
    } while (!accept(c) && ++tries < 1000);
  }
  return out;
}

inline std::vector<std::array<double, 2>> centres_for(const Dataset& data, std::size_t count,
                                                      const Common& common) {
  return centres_for(data, count, common, [](const std::array<double, 2>&) { return true; });
}

// The fleet views the data's points: an experiment's data outlives its backend.
inline simulation::SimulatedFleet fleet_for(const Dataset& data, double capacity,
                                            const Common& common) {
  simulation::SimulatedFleetOptions options;
  options.threads = common.threads;
  options.noise = common.noise;
  options.first_user = static_cast<coordinator::UserId>(data.first);
  options.borrow_points = true;
  return std::move(*simulation::SimulatedFleet::create(*DeviceConfig::cgp(capacity), data.points,
                                                       data.dimension, common.seed, options));
}

inline std::uint64_t rep_seed(const Common& common, std::size_t rep) {
  return common.seed * 0x9e3779b97f4a7c15ULL + rep + 1;
}

// The q-quantile of a copy of `values` (nearest rank); 0 when empty.
inline double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  const auto at = static_cast<std::size_t>(q * static_cast<double>(values.size() - 1) + 0.5);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(at), values.end());
  return values[at];
}

}  // namespace cgp::experiments
