// Synthetic users for coordinator tests: reproducible point clouds and fleets.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "cgp/common/geometry/region.hpp"
#include "cgp/coordinator/charges.hpp"
#include "cgp/coordinator/elimination.hpp"
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

// The axis-aligned square [x0, x0 + side] × [y0, y0 + side].
inline geometry::Region square(double x0, double y0, double side) {
  const double lo[2] = {x0, y0}, hi[2] = {x0 + side, y0 + side};
  return *geometry::Box::create(lo, hi);
}

// Every user of the fleet, each charged at most `charge`.
inline coordinator::UserCharges charge_everyone(double charge) {
  return coordinator::UserCharges::everyone(coordinator::Charge{charge});
}

// Two runs of the same query that must agree bit for bit: lists, estimates and report.
inline void check_same_result(const coordinator::EliminationResult& a,
                              const coordinator::EliminationResult& b) {
  CHECK(a.s1 == b.s1);
  CHECK(a.s0 == b.s0);
  CHECK(a.remaining == b.remaining);
  CHECK(a.estimates.sum == b.estimates.sum);
  CHECK(a.estimates.rho_bar == b.estimates.rho_bar);
  CHECK(a.report.charged == b.report.charged);
  CHECK(a.report.refused == b.report.refused);
  CHECK(a.report.rejected == b.report.rejected);
  CHECK(a.report.unanswered == b.report.unanswered);
  CHECK(a.report.asked_per_round == b.report.asked_per_round);
  CHECK(a.report.eliminated_per_round == b.report.eliminated_per_round);
  CHECK(a.report.rounds_used == b.report.rounds_used);
}

}  // namespace cgp::test
