// Top-k busiest regions (top_regions.hpp) against brute-force counts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "cgp/coordinator/top_regions.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "fleet_fixtures.hpp"
#include "support/binomial_limit.hpp"
#include "support/errors.hpp"
#include "support/lean.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;

namespace {

// Users in a 4 × 4 grid of 2.5 km cells: cell g holds about (g + 1)·25 users (so neighbouring
// ranks differ by ~25 users), plus uniform background.
std::vector<double> graded_cells(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> inside(0, 2500), anywhere(0, 10000);
  std::vector<double> points;
  for (std::size_t g = 0; g < 16; ++g)
    for (std::size_t i = 0; i < (g + 1) * 25; ++i) {
      points.push_back(2500.0 * static_cast<double>(g % 4) + inside(rng));
      points.push_back(2500.0 * static_cast<double>(g / 4) + inside(rng));
    }
  for (int i = 0; i < 600; ++i) points.push_back(anywhere(rng)), points.push_back(anywhere(rng));
  return points;
}

}  // namespace

TEST_CASE("top regions finds the true top k and covers every count at rate 1 - beta0",
          "[coordinator][top_regions][statistical]") {
  CGP_SEEDED(1410);
  const auto points = graded_cells(seed);
  const std::size_t n = points.size() / 2, k = 3;
  const auto cells = *grid_regions(0, 0, 2500, 4, 4);
  std::vector<double> truth;
  for (const auto& cell : cells)
    truth.push_back(static_cast<double>(simulation::exact_count(points, 2, cell)));
  std::vector<std::size_t> order(cells.size());
  for (std::size_t g = 0; g < order.size(); ++g) order[g] = g;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return truth[a] > truth[b]; });
  REQUIRE(truth[order[k - 1]] > truth[order[k]]);  // a unique true top k
  std::vector<std::size_t> true_top(order.begin(), order.begin() + k);
  std::sort(true_top.begin(), true_top.end());

  // Over R runs the joint intervals miss in Binomial(R, p ≤ β₀) runs; more than the limit with
  // probability ≤ 1e-8 (the exact binomial tail). A certified wrong top k needs a miss.
  const int runs = test::repetitions(60, 20);
  const double beta0 = 0.05;
  int misses = 0, wrong = 0, certified = 0;
  double charged = 0;
  for (int run = 0; run < runs; ++run) {
    auto fleet = test::make_fleet(points, 2, 1e-2, seed + static_cast<std::uint64_t>(run), 1);
    BudgetMirror mirror(n, 1e-2);
    AccuracyFirstOptions options;
    options.method = Method::PM0;
    options.beta = 4 * beta0;
    options.max_rounds = 12;
    const auto result = top_regions(fleet, mirror, cells, k, test::charge_everyone(1e-2), options);
    REQUIRE(result.has_value());
    REQUIRE(result->top.size() == k);
    REQUIRE(result->counts.size() == cells.size());
    bool miss = false;
    for (const auto& c : result->counts)
      miss |= truth[c.region] < c.lower || truth[c.region] > c.upper;
    misses += miss;
    std::vector<std::size_t> top = result->top;
    std::sort(top.begin(), top.end());
    if (result->certified) {
      ++certified;
      wrong += top != true_top;
    }
    for (UserId u = 0; u < n; ++u) {
      REQUIRE(result->report.charged[u].value() <= 1e-2);
      charged += result->report.charged[u].value();
    }
  }
  const int limit = test::binomial_upper_limit(runs, beta0, 1e-8);
  INFO(misses << " runs missed a count (limit " << limit << "), " << certified << " certified, "
              << wrong << " certified a wrong top k, of " << runs);
  CHECK(misses <= limit);
  CHECK(wrong <= misses);
  CHECK(certified > runs / 2);  // enough budget to separate ranks ~25 users apart
  CHECK(charged / (runs * static_cast<double>(n)) < 0.5 * 1e-2);  // users stop paying early
}

TEST_CASE("top regions refuses bad arguments by name before asking anyone",
          "[coordinator][top_regions]") {
  const auto points = test::uniform_square(100, 1000, 5);
  auto fleet = test::make_fleet(points, 2, 1.0, 5);
  BudgetMirror mirror(fleet.size(), 1.0);
  const auto cells = *grid_regions(0, 0, 250, 4, 4);
  const auto everyone = test::charge_everyone(1e-3);
  AccuracyFirstOptions options;
  options.method = Method::PM0;
  CGP_REQUIRE_ERROR(top_regions(fleet, mirror, cells, 0, everyone, options),
                    ErrorCode::out_of_range, "k");
  CGP_REQUIRE_ERROR(top_regions(fleet, mirror, cells, 17, everyone, options),
                    ErrorCode::out_of_range, "k");
  CGP_REQUIRE_ERROR(
      top_regions(fleet, mirror, std::span<const geometry::Region>{}, 1, everyone, options),
      ErrorCode::invalid_argument, "regions");
  auto pm1 = options;
  pm1.method = Method::PM1;
  CGP_REQUIRE_ERROR(top_regions(fleet, mirror, cells, 2, everyone, pm1),
                    ErrorCode::invalid_argument, "method");
  auto flat = options;
  flat.growth = 1;
  CGP_REQUIRE_ERROR(top_regions(fleet, mirror, cells, 2, everyone, flat), ErrorCode::out_of_range,
                    "growth");
  CGP_REQUIRE_ERROR(grid_regions(0, 0, 0, 4, 4), ErrorCode::not_positive, "cell");
  CGP_REQUIRE_ERROR(grid_regions(0, 0, 10, 0, 4), ErrorCode::out_of_range, "columns");
  CHECK(fleet.values_released() == 0);
}
