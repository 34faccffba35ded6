#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "cgp/common/privacy/approx_gp_filter.hpp"
#include "cgp/common/privacy/conversions.hpp"
#include "support/eq3_oracle.hpp"
#include "support/errors.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::privacy;

TEST_CASE("eq. (10) capacity: everything below it continues, just above it halts",
          "[privacy][filter][eq10]") {
  for (double budget : {0.01, 0.1, 1.0, 10.0}) {
    for (double delta : {1e-10, 1e-6, 1e-3, 0.1}) {
      for (double lambda : {0.1, 1.0, 100.0}) {
        INFO("B=" << budget << " delta=" << delta << " lambda=" << lambda);
        double capacity = *approx_gp_capacity(budget, delta, lambda);
        REQUIRE(capacity > 0);
        CHECK(approx_gp_filter_continues(capacity, budget, delta, lambda));
        CHECK_FALSE(approx_gp_filter_continues(capacity * (1 + 1e-9), budget, delta, lambda));
        // Below the capacity, eq. (10) evaluated independently on a grid of s agrees: CONT.
        CHECK(test::eq3_grid_min(capacity * (1 - 1e-3), delta, lambda, 1.0002) <= budget);
        // The same total, read as a CGP budget, is (B, δ, Λ)-GP by Lemma 3.2 (eq. (10) is
        // Lemma 3.2 minimised over s).
        CHECK(gp_epsilon_from_cgp(capacity, delta, lambda)->epsilon <= budget * (1 + 1e-12));
        // And the capacity is tight: 0.1% more needs more than B at every s.
        CHECK(gp_epsilon_from_cgp(capacity * 1.001, delta, lambda)->epsilon > budget);
      }
    }
  }
}

TEST_CASE("eq. (10) filter is monotone in the running total", "[privacy][filter][eq10]") {
  CGP_SEEDED(20261121);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    double budget = std::pow(10.0, -2 + 3 * unit(rng));
    double delta = std::pow(10.0, -12 + 11 * unit(rng));
    double lambda = std::pow(10.0, -1 + 4 * unit(rng));
    double capacity = *approx_gp_capacity(budget, delta, lambda);
    double sum = 0;
    bool halted = false;
    for (int step = 0; step < 60; ++step) {
      sum += capacity * unit(rng) / 10;
      bool cont = approx_gp_filter_continues(sum, budget, delta, lambda);
      if (halted) CHECK_FALSE(cont);  // once HALT, every larger total halts too
      halted = halted || !cont;
      CHECK(cont == (sum <= capacity));
    }
  }
}

TEST_CASE("eq. (10) filter halts on anything it cannot judge", "[privacy][filter][eq10]") {
  CHECK_FALSE(approx_gp_filter_continues(std::nan(""), 1, 1e-6, 1));
  CHECK_FALSE(approx_gp_filter_continues(-1, 1, 1e-6, 1));
  CHECK_FALSE(approx_gp_filter_continues(INFINITY, 1, 1e-6, 1));
  CHECK_FALSE(approx_gp_filter_continues(0.0, -1, 1e-6, 1));
  CHECK_FALSE(approx_gp_filter_continues(0.0, 1, 0, 1));
  CHECK(approx_gp_filter_continues(0.0, 1, 1e-6, 1));
  CGP_REQUIRE_ERROR(approx_gp_capacity(0, 1e-6, 1), ErrorCode::not_positive, "budget");
  CGP_REQUIRE_ERROR(approx_gp_capacity(1, 1.5, 1), ErrorCode::out_of_range, "delta");
  CGP_REQUIRE_ERROR(approx_gp_capacity(1, 1e-6, std::nan("")), ErrorCode::not_finite, "lambda");
}
