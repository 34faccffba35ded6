// Synthetic users for coordinator tests: reproducible point clouds and fleets.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "cgp/coordinator/charges.hpp"
#include "cgp/simulation/simulated_fleet.hpp"

namespace cgp::test {

// n points uniform in [0, side]² (row-major x, y).
inline std::vector<double> uniform_square(std::size_t n, double side, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coordinate(0, side);
  std::vector<double> points(2 * n);
  for (double& v : points) v = coordinate(rng);
  return points;
}

inline simulation::SimulatedFleet make_fleet(const std::vector<double>& points, std::size_t dim,
                                             double budget, std::uint64_t seed,
                                             unsigned threads = 2) {
  auto fleet =
      simulation::SimulatedFleet::create(*DeviceConfig::cgp(budget), points, dim, seed, threads);
  REQUIRE(fleet.has_value());
  return std::move(*fleet);
}

// Every user of the fleet, each charged at most `charge`.
inline coordinator::UserCharges charge_everyone(double charge) {
  return coordinator::UserCharges::everyone(coordinator::Charge{charge});
}

}  // namespace cgp::test
