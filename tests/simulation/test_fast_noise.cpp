// The simulation's fast noise: the device's grid and σ with counter-based normals.
// It must have the exact sampler's law, leave charges and refusals to the device's own code,
// and give the same result for any thread count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cgp/client/privatizer.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/simulation/device_fleet.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "cgp/simulation/simulated_fleet.hpp"
#include "simulation/fleet_fixtures.hpp"
#include "support/errors.hpp"
#include "support/lean.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;

namespace {

// A round asking users[k] for its distance to p at rho[k].
RoundRequest distance_round(const char* query_id, const double* p, const std::vector<UserId>& users,
                            const std::vector<double>& rho) {
  RoundRequest request;
  request.query_id = query_id;
  request.statistic = StatisticKind::distance_to_point;
  request.point = std::span<const double>(p, 2);
  request.users = users;
  request.rho = rho;
  return request;
}

// Every user's release of its distance to p = (0, 0) in one round asked at ρ.
std::vector<double> one_round_releases(const std::vector<double>& points, std::uint64_t seed,
                                       SimulationNoise noise, double rho) {
  auto fleet = *SimulatedFleet::create(*DeviceConfig::cgp(1.0), points, 2, seed, 2, noise);
  const double p[2] = {0, 0};
  std::vector<UserId> users(fleet.size());
  for (UserId u = 0; u < fleet.size(); ++u) users[u] = u;
  const std::vector<double> asked(fleet.size(), rho);
  const RoundRequest request = distance_round("law", p, users, asked);
  RoundReplies replies;
  fleet.ask(request, replies);
  for (auto kind : replies.kind) REQUIRE(kind == ReplyKind::answered);
  return replies.values;
}

// Two-sample Kolmogorov–Smirnov statistic sup |F_a − F_b|.
double ks_statistic(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  double d = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double x = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= x) ++i;
    while (j < b.size() && b[j] <= x) ++j;
    d = std::max(d, std::abs(static_cast<double>(i) / static_cast<double>(a.size()) -
                             static_cast<double>(j) / static_cast<double>(b.size())));
  }
  return d;
}

}  // namespace

// 20,000 users at the origin each release |x − p| = 0 plus noise, once with the exact sampler
// and once with fast noise, at the same ρ (σ = 1/√(2ρ) ≈ 22.4 m). Two-sample KS: under equal
// laws P[D > c·√((n+m)/(nm))] ≤ 2·exp(−2c²); c = √(ln(2/1e-7)/2) ≈ 2.90 gives a false-failure
// rate ≤ 1e-7 and D_crit ≈ 0.029, which a σ off by 20% or a bias of 0.08σ exceeds.
TEST_CASE("fast noise has the exact sampler's law at the same sigma", "[simulation][statistical]") {
  CGP_SEEDED(1201);
  const std::size_t n = 20000;
  const std::vector<double> points(2 * n, 0.0);
  const auto exact = one_round_releases(points, seed, SimulationNoise::exact, 1e-3);
  const auto fast = one_round_releases(points, seed + 1, SimulationNoise::fast, 1e-3);
  REQUIRE(fast.size() == n);
  const double c = std::sqrt(std::log(2 / 1e-7) / 2);
  const double critical = c * std::sqrt(2.0 / static_cast<double>(n));
  const double d = ks_statistic(exact, fast);
  INFO("KS D = " << d << ", critical " << critical);
  CHECK(d <= critical);
  // The power of the test: a σ 25% too large is refused at the same threshold.
  std::vector<double> wider = fast;
  for (double& v : wider) v *= 1.25;
  CHECK(ks_statistic(exact, wider) > critical);
  // Releases lie on the device's grid, the one its plan chooses.
  const auto plan = client::plan_noise(1.0, 1e-3, 1.0);
  REQUIRE(plan.has_value());
  for (std::size_t k = 0; k < 100; ++k) {
    const double in_units = fast[k] / plan->grid();
    CHECK(in_units == std::round(in_units));
  }
}

TEST_CASE("fast noise: the same result for 1 and 2 threads, and from the seed only",
          "[simulation]") {
  CGP_SEEDED(1202);
  const auto points = test::uniform_square(5000, 10000, seed);
  double lo[2] = {3000, 3000}, hi[2] = {6000, 6000};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  auto run = [&](unsigned threads, std::uint64_t run_seed) {
    auto fleet = *SimulatedFleet::create(*DeviceConfig::cgp(1.0), points, 2, run_seed, threads);
    REQUIRE(fleet.noise() == SimulationNoise::fast);  // the default
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    QueryOptions o;
    o.method = Method::PM1;
    o.rounds = 8;
    return *range_count(fleet, mirror, range, test::charge_everyone(1e-4), o);
  };
  const auto one = run(1, seed), two = run(2, seed), other = run(2, seed + 1);
  CHECK(one.estimate == two.estimate);
  CHECK(one.report.charged == two.report.charged);
  CHECK(one.report.eliminated_per_round == two.report.eliminated_per_round);
  CHECK(one.report.eliminated_per_round != other.report.eliminated_per_round);
}

TEST_CASE("fast noise leaves admission, charges and refusals to the device's filter",
          "[simulation]") {
  const auto points = test::uniform_square(200, 1000, 3);
  for (SimulationNoise noise : {SimulationNoise::fast, SimulationNoise::exact}) {
    INFO(noise_name(noise));
    auto fleet = *SimulatedFleet::create(*DeviceConfig::cgp(1.0), points, 2, 3, 2, noise);
    BudgetMirror fresh(fleet.size(), fleet.initial_budget());
    double lo[2] = {0, 0}, hi[2] = {500, 500};
    const geometry::Region range = *geometry::Box::create(lo, hi);
    QueryOptions o;
    o.method = Method::BM1;
    o.query_id = "first";
    auto first = range_count(fleet, fresh, range, test::charge_everyone(0.6), o);
    REQUIRE(first.has_value());
    // A second coordinator (fresh mirror) asks again: 0.6 more does not fit in 1.0.
    BudgetMirror second_mirror(fleet.size(), fleet.initial_budget());
    o.query_id = "second";
    auto second = range_count(fleet, second_mirror, range, test::charge_everyone(0.6), o);
    REQUIRE(second.has_value());
    CHECK(second->report.refused.size() == fleet.size());
    for (UserId u = 0; u < fleet.size(); ++u) {
      CHECK(fleet.spent(u) == Approx(first->report.charged[u].value()).epsilon(1e-12));
      CHECK(fleet.spent(u) <= 0.6);
    }
  }
  CGP_REQUIRE_ERROR(parse_noise("loud"), ErrorCode::invalid_argument, "noise");
  CHECK(*parse_noise("exact") == SimulationNoise::exact);
}

// A query's answers have the same law in both modes: PM1 range counts over 2,000 users, 300
// repetitions each (fresh seeds; 100 under the sanitizers), estimates and PrivSav compared by
// two-sample KS at a false-failure rate ≤ 1e-7 each (c ≈ 2.90, D_crit ≈ 0.237 at 300, 0.41 at
// 100; ties only make KS conservative).
TEST_CASE("fast and exact noise give the same query results in distribution",
          "[simulation][statistical]") {
  CGP_SEEDED(1203);
  const auto points = test::uniform_square(2000, 10000, seed);
  double lo[2] = {2000, 2000}, hi[2] = {6000, 6000};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  const int reps = test::repetitions(300, 100);
  auto run = [&](SimulationNoise noise, std::uint64_t first_seed) {
    std::vector<double> estimates, savings;
    auto fleet = *SimulatedFleet::create(*DeviceConfig::cgp(1e-4), points, 2, 0, 2, noise);
    for (int rep = 0; rep < reps; ++rep) {
      fleet.reset(first_seed + static_cast<std::uint64_t>(rep));
      BudgetMirror mirror(fleet.size(), fleet.initial_budget());
      QueryOptions o;
      o.method = Method::PM1;
      auto result = range_count(fleet, mirror, range, test::charge_everyone(1e-4), o);
      REQUIRE(result.has_value());
      estimates.push_back(result->estimate);
      savings.push_back(privacy_saving(result->report.charged, 1e-4));
    }
    return std::pair{estimates, savings};
  };
  const auto [exact_estimates, exact_savings] = run(SimulationNoise::exact, seed * 1000);
  const auto [fast_estimates, fast_savings] = run(SimulationNoise::fast, seed * 1000 + reps);
  const double critical = std::sqrt(std::log(2 / 1e-7) / 2) * std::sqrt(2.0 / reps);
  INFO("critical " << critical);
  CHECK(ks_statistic(exact_estimates, fast_estimates) <= critical);
  CHECK(ks_statistic(exact_savings, fast_savings) <= critical);
}

// The device's decision rules are written once (plan_release, PrivacyFilter): a fleet of real
// client::Device objects and the simulated fleet, in either noise mode, admit, refuse, reject,
// halt and charge identically on the same sequence of rounds — ρ too small for the device, too
// large for what is left, 0, NaN, and ordinary — with and without sticky halting.
TEST_CASE("the simulated fleet refuses, halts and charges as devices do", "[simulation]") {
  CGP_SEEDED(1204);
  std::mt19937_64 rng(seed);
  const auto points = test::uniform_square(300, 1000, seed);
  const double p[2] = {500, 500};
  const double asks[] = {0.05, 0.2, 0.31, 1e-7, 0.0, std::nan(""), 0.6, 0.011};
  for (bool sticky : {false, true}) {
    INFO("sticky " << sticky);
    const auto config = *DeviceConfig::cgp(1.0, sticky);
    auto devices = *DeviceFleet::create(config, points, 2, seed, 2);
    auto fast = *SimulatedFleet::create(config, points, 2, seed, 2, SimulationNoise::fast);
    auto exact = *SimulatedFleet::create(config, points, 2, seed, 2, SimulationNoise::exact);
    std::vector<UserId> users(points.size() / 2);
    for (UserId u = 0; u < users.size(); ++u) users[u] = u;
    for (std::uint32_t round = 1; round <= 12; ++round) {
      std::vector<double> rho(users.size());
      for (double& r : rho) r = asks[rng() % std::size(asks)];
      RoundRequest request;
      request.query_id = "parity";
      request.round = round;
      request.statistic = round % 2 ? StatisticKind::distance_to_point : StatisticKind::location;
      request.point = p;
      request.users = users;
      request.rho = rho;
      RoundReplies from_devices, from_fast, from_exact;
      devices.ask(request, from_devices);
      fast.ask(request, from_fast);
      exact.ask(request, from_exact);
      for (const RoundReplies* simulated : {&from_fast, &from_exact}) {
        CHECK(simulated->kind == from_devices.kind);
        CHECK(simulated->charged == from_devices.charged);
        CHECK(simulated->remaining == from_devices.remaining);
      }
    }
    for (UserId u = 0; u < users.size(); ++u) {
      CHECK(fast.spent(u) == exact.spent(u));
      CHECK(fast.spent(u) <= 1.0);
    }
  }
}

// Alg. 3 asks nearly every user a different ρ. A round of 5,000 users with 5,000 distinct ρ
// (more than the per-thread plan cache holds, so plans are evicted inside a batch) must give
// each user exactly the release it gets when asked alone: the same noise on its own plan.
TEST_CASE("fast noise: each user releases on its own plan when every rho differs", "[simulation]") {
  CGP_SEEDED(1205);
  const auto points = test::uniform_square(5000, 10000, seed);
  const double p[2] = {5000, 5000};
  const auto config = *DeviceConfig::cgp(1.0);
  std::vector<UserId> users(points.size() / 2);
  std::vector<double> rho(users.size());
  for (UserId u = 0; u < users.size(); ++u) {
    users[u] = u;
    rho[u] = 1e-3 * (1 + static_cast<double>(u) / 1250);  // a factor of 5: several grids
  }
  const RoundRequest request = distance_round("distinct", p, users, rho);
  auto together = *SimulatedFleet::create(config, points, 2, seed, 2);
  RoundReplies all;
  together.ask(request, all);
  auto alone = *SimulatedFleet::create(config, points, 2, seed, 1);
  for (UserId u = 0; u < users.size(); ++u) {
    RoundRequest one = request;
    one.users = std::span<const UserId>(&users[u], 1);
    one.rho = std::span<const double>(&rho[u], 1);
    RoundReplies single;
    alone.ask(one, single);
    INFO("user " << u);
    REQUIRE(all.kind[u] == ReplyKind::answered);
    REQUIRE(single.kind[0] == ReplyKind::answered);
    CHECK(all.values[u] == single.values[0]);
    CHECK(all.charged[u] == single.charged[0]);
  }
}
