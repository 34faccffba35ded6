#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "cgp/coordinator/queries.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "fleet_fixtures.hpp"
#include "support/errors.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using test::square;
using namespace cgp::simulation;

namespace {
QueryOptions options_for(Method method, std::size_t rounds, const std::string& id) {
  QueryOptions o;
  o.method = method;
  o.rounds = rounds;
  o.query_id = id;
  return o;
}
constexpr Method kAllMethods[] = {Method::BM0, Method::BM1, Method::PM0, Method::PM1};
}  // namespace

TEST_CASE("with a very large rho every estimate is exact", "[coordinator][queries]") {
  CGP_SEEDED(4001);
  auto points = test::uniform_square(2000, 10000, seed);
  const auto range = square(2000, 3000, 2500);
  const double p[2] = {5000, 5000};
  const auto truth_count = static_cast<double>(exact_count(points, 2, range));
  const double truth_kde = exact_kde(points, 2, p, 800);
  KnnOracle oracle(points, 2);
  auto truth_knn = oracle.nearest(p, 10);
  for (Method method : kAllMethods) {
    INFO("method " << method_name(method));
    // A capacity that covers the three queries (ρ ≥ capacity·2^-18 per round).
    auto fleet = test::make_fleet(points, 2, 1e5, seed);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    auto rho = test::charge_everyone(1e3);  // σ ≈ 2 cm against a 10 km square
    auto count = range_count(fleet, mirror, range, rho, options_for(method, 4, "count"));
    REQUIRE(count.has_value());
    CHECK(count->estimate == truth_count);
    auto density = kde(fleet, mirror, p, 800, rho, options_for(method, 4, "kde"));
    REQUIRE(density.has_value());
    CHECK(density->estimate == Approx(truth_kde).epsilon(1e-4));  // noise ≈ 4e-6 relative
    auto neighbours = knn(fleet, mirror, p, 10, rho, options_for(method, 4, "knn"));
    REQUIRE(neighbours.has_value());
    // The same ten users; their order follows the noisy estimates, so two users whose true
    // distances differ by less than the noise (σ ≈ 3 cm between two estimates; 965 and 1144
    // here are 5 cm apart) may trade places: the order is checked to within 0.5 m (15σ).
    auto found = neighbours->neighbours, expected = truth_knn;
    std::sort(found.begin(), found.end());
    std::sort(expected.begin(), expected.end());
    CHECK(found == expected);
    for (std::size_t a = 1; a < neighbours->neighbours.size(); ++a) {
      const UserId before = neighbours->neighbours[a - 1], after = neighbours->neighbours[a];
      CHECK(std::hypot(points[2 * before] - p[0], points[2 * before + 1] - p[1]) <=
            std::hypot(points[2 * after] - p[0], points[2 * after + 1] - p[1]) + 0.5);
    }
  }
}

TEST_CASE("identical seeds give identical results with 1 and 2 threads",
          "[coordinator][queries][determinism]") {
  CGP_SEEDED(4002);
  auto points = test::uniform_square(6000, 10000, seed);  // above the parallel threshold
  const auto range = square(1000, 1000, 3000);
  std::vector<double> estimates[2];
  std::vector<Charge> charges[2];
  for (unsigned threads : {1u, 2u}) {
    auto fleet = test::make_fleet(points, 2, 1.0, seed, threads);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    auto rho = test::charge_everyone(1e-4);
    for (Method method : kAllMethods) {
      auto result =
          range_count(fleet, mirror, range, rho,
                      options_for(method, 8, std::string("q-") + std::string(method_name(method))));
      REQUIRE(result.has_value());
      estimates[threads - 1].push_back(result->estimate);
      charges[threads - 1].insert(charges[threads - 1].end(), result->report.charged.begin(),
                                  result->report.charged.end());
    }
  }
  CHECK(estimates[0] == estimates[1]);
  CHECK(charges[0] == charges[1]);
}

TEST_CASE("PM methods save budget, more with larger rho, at the error of BM",
          "[coordinator][queries][savings]") {
  CGP_SEEDED(4003);
  auto points = test::uniform_square(4000, 20000, seed);
  const auto range = square(8000, 8000, 3000);
  const double truth = static_cast<double>(exact_count(points, 2, range));
  double saving_small = 0, saving_large = 0;
  for (double rho_value : {1e-5, 1e-3}) {
    double error[4] = {0, 0, 0, 0}, saving[4] = {0, 0, 0, 0};
    const int reps = 20;
    for (int rep = 0; rep < reps; ++rep) {
      // Capacity for the four methods' queries; every round's ρ is ≥ capacity·2^-18.
      auto fleet = test::make_fleet(points, 2, 1e-2, seed + static_cast<std::uint64_t>(rep));
      BudgetMirror mirror(fleet.size(), fleet.initial_budget());
      auto rho = test::charge_everyone(rho_value);
      for (int m = 0; m < 4; ++m) {
        auto result = range_count(
            fleet, mirror, range, rho,
            options_for(kAllMethods[m], 8, "rep" + std::to_string(rep) + "m" + std::to_string(m)));
        REQUIRE(result.has_value());
        error[m] += count_error(result->estimate, truth) / reps;
        saving[m] += privacy_saving(result->report.charged, rho_value) / reps;
      }
    }
    INFO("rho " << rho_value << " errors BM0 " << error[0] << " BM1 " << error[1] << " PM0 "
                << error[2] << " PM1 " << error[3] << " savings PM0 " << saving[2] << " PM1 "
                << saving[3]);
    // Baselines spend everything; PM methods keep a positive share.
    CHECK(saving[0] < 1e-9);
    CHECK(saving[1] < 1e-9);
    CHECK(saving[2] > 0.05);
    CHECK(saving[3] > 0.05);
    // Remark 6: PM's error is that of its baseline up to noise (20 repetitions; a loose band).
    CHECK(error[2] <= error[0] * 1.5 + 0.02);
    CHECK(error[3] <= error[1] * 1.5 + 0.02);
    (rho_value < 1e-4 ? saving_small : saving_large) = saving[3];
  }
  CHECK(saving_large > saving_small);
}

TEST_CASE("range counting on polygons and discs agrees with boxes where the shapes coincide",
          "[coordinator][queries]") {
  CGP_SEEDED(4004);
  auto points = test::uniform_square(3000, 10000, seed);
  const auto box = square(2000, 2000, 4000);
  const auto polygon = geometry::Region(*geometry::Polygon::create(
      geometry::Ring{{2000, 2000}, {6000, 2000}, {6000, 6000}, {2000, 6000}}));
  double centre[2] = {5000, 5000};
  const auto disc = geometry::Region(*geometry::Ball::create(centre, 2000));
  for (Method method : kAllMethods) {
    INFO("method " << method_name(method));
    double estimates[2];
    for (int shape = 0; shape < 2; ++shape) {
      auto fleet = test::make_fleet(points, 2, 1.0, seed);
      BudgetMirror mirror(fleet.size(), fleet.initial_budget());
      auto rho = test::charge_everyone(1e-4);
      auto result = range_count(fleet, mirror, shape == 0 ? box : polygon, rho,
                                options_for(method, 8, "same-query"));
      REQUIRE(result.has_value());
      estimates[shape] = result->estimate;
    }
    CHECK(estimates[0] == estimates[1]);
    // A disc: exact with a large ρ, close with a moderate one.
    auto fleet = test::make_fleet(points, 2, 1e5, seed);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    auto exact_rho = test::charge_everyone(1e3);
    auto on_disc = range_count(fleet, mirror, disc, exact_rho, options_for(method, 4, "disc"));
    REQUIRE(on_disc.has_value());
    CHECK(on_disc->estimate == static_cast<double>(exact_count(points, 2, disc)));
  }
}

TEST_CASE("no user's total charge exceeds its budget, refusals are reported",
          "[coordinator][queries][budget]") {
  CGP_SEEDED(4005);
  auto points = test::uniform_square(3000, 10000, seed);
  const double budget = 3e-4;
  auto fleet = test::make_fleet(points, 2, budget, seed);
  BudgetMirror mirror(fleet.size(), fleet.initial_budget());
  auto rho = test::charge_everyone(1e-4);
  std::size_t refused = 0;
  for (int q = 0; q < 8; ++q) {
    Method method = kAllMethods[q % 4];
    auto result = range_count(fleet, mirror, square(1000.0 * q, 1000, 3000), rho,
                              options_for(method, 8, "budget-" + std::to_string(q)));
    REQUIRE(result.has_value());
    refused += result->report.refused.size();
    for (UserId u = 0; u < fleet.size(); ++u) {
      CHECK(fleet.spent(u) <= budget);
      // The mirror is a worst-case view: never more than what is truly left.
      CHECK(mirror.remaining(u) <= budget - fleet.spent(u) + 1e-18);
    }
  }
  CHECK(refused > 0);  // later queries meet exhausted users and say so
}

TEST_CASE("reports: rounds used, eliminations per round, charges", "[coordinator][queries]") {
  CGP_SEEDED(4006);
  auto points = test::uniform_square(2000, 10000, seed);
  auto fleet = test::make_fleet(points, 2, 1.0, seed);
  BudgetMirror mirror(fleet.size(), fleet.initial_budget());
  auto rho = test::charge_everyone(1e-3);
  auto result = range_count(fleet, mirror, square(4000, 4000, 1000), rho,
                            options_for(Method::PM1, 6, "report"));
  REQUIRE(result.has_value());
  const auto& r = result->report;
  CHECK(r.rounds_used >= 1);
  CHECK(r.rounds_used <= 6);
  CHECK(r.asked_per_round.size() == r.rounds_used);
  CHECK(r.eliminated_per_round.size() == r.rounds_used);
  CHECK(r.asked_per_round[0] == fleet.size());
  std::size_t eliminated = 0;
  for (auto e : r.eliminated_per_round) eliminated += e;
  CHECK(eliminated <= fleet.size());
  CHECK(r.eliminated_per_round[0] > fleet.size() / 2);  // most users are far from a 1 km square
  for (UserId u = 0; u < fleet.size(); ++u) CHECK(r.charged[u].value() == Approx(fleet.spent(u)));
}

TEST_CASE("threshold query (Alg. 9)", "[coordinator][queries][threshold]") {
  CGP_SEEDED(4007);
  const double count = 480;  // households below the income line, out of N = 1000
  std::vector<double> component{count};
  for (Method method : {Method::BM1, Method::PM1}) {
    for (double q : {0.3, 0.7}) {
      auto fleet = test::make_fleet(component, 1, 100.0, seed);
      BudgetMirror mirror(1, fleet.initial_budget());
      const coordinator::Charge rho{1.0};
      QueryOptions o = options_for(method, 8, "threshold");
      auto result = threshold(fleet, mirror, 0, q, 1000, rho, o);
      REQUIRE(result.has_value());
      INFO("method " << method_name(method) << " q " << q);
      CHECK(result->below == (count < q * 1000));
      if (method == Method::PM1) CHECK(result->report.rounds_used == 1);  // decided at once
    }
  }
}

TEST_CASE("a query charges each user at most its cap and the baselines all of it",
          "[coordinator][queries]") {
  // The public unit is the charge. Before, the engine took the asked ρ, and
  // asking 1e-4 charged 1.00195e-4.
  CGP_SEEDED(5011);
  auto points = test::uniform_square(300, 3000, seed);
  double lo[2] = {1000, 1000}, hi[2] = {2000, 2000};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  for (Method method : {Method::BM0, Method::BM1, Method::PM0, Method::PM1}) {
    auto fleet = test::make_fleet(points, 2, 1.0, seed);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    std::vector<UserId> users;
    std::vector<Charge> caps;
    for (UserId u = 0; u < fleet.size(); u += 2) {
      users.push_back(u);
      caps.emplace_back(1e-4 * (1 + u % 7));
    }
    QueryOptions o;
    o.method = method;
    auto result = range_count(fleet, mirror, range, UserCharges::per_user(users, caps), o);
    REQUIRE(result.has_value());
    INFO("method " << method_name(method));
    for (std::size_t k = 0; k < users.size(); ++k) {
      CHECK(result->report.charged[users[k]].value() <= caps[k].value());
      if (!eliminates(method))
        CHECK(result->report.charged[users[k]].value() >= caps[k].value() * 0.999999);
      CHECK(fleet.spent(users[k]) ==
            Approx(result->report.charged[users[k]].value()).epsilon(1e-12));
    }
    for (UserId u = 1; u < fleet.size(); u += 2) CHECK(fleet.spent(u) == 0);  // not listed
  }
}

TEST_CASE("queries reject bad parameters by name", "[coordinator][queries]") {
  auto points = test::uniform_square(100, 100, 1);
  auto fleet = test::make_fleet(points, 2, 1.0, 1);
  BudgetMirror mirror(fleet.size(), fleet.initial_budget());
  auto rho = test::charge_everyone(1e-3);
  const double p[2] = {1, 1};
  QueryOptions o;
  CHECK(kde(fleet, mirror, p, 0, rho, o).error().parameter == "bandwidth");
  CHECK(knn(fleet, mirror, p, 0, rho, o).error().parameter == "k");
  CHECK(knn(fleet, mirror, p, 100, rho, o).error().parameter == "k");
  // Charges: one per listed user, finite and positive, users in the fleet and listed once.
  const std::vector<UserId> some{1, 2, 3};
  CGP_REQUIRE_ERROR(kde(fleet, mirror, p, 1, UserCharges::per_user(some, {Charge{1e-3}}), o),
                    ErrorCode::dimension_mismatch, "charge");
  std::vector<Charge> caps(some.size(), Charge{1e-3});
  caps[2] = Charge{-1};
  CGP_REQUIRE_ERROR(kde(fleet, mirror, p, 1, UserCharges::per_user(some, caps), o),
                    ErrorCode::not_positive, "charge[2]");
  CGP_REQUIRE_ERROR(kde(fleet, mirror, p, 1, test::charge_everyone(0), o), ErrorCode::not_positive,
                    "charge");
  CGP_REQUIRE_ERROR(kde(fleet, mirror, p, 1, test::charge_everyone(INFINITY), o),
                    ErrorCode::not_finite, "charge");
  CGP_REQUIRE_ERROR(kde(fleet, mirror, p, 1, UserCharges::uniform(Charge{1e-3}, {5, 100}), o),
                    ErrorCode::out_of_range, "users");
  CGP_REQUIRE_ERROR(kde(fleet, mirror, p, 1, UserCharges::uniform(Charge{1e-3}, {5, 6, 5}), o),
                    ErrorCode::invalid_argument, "users");
  CGP_REQUIRE_ERROR(kde(fleet, mirror, p, 1, UserCharges::uniform(Charge{1e-3}, {}), o),
                    ErrorCode::invalid_argument, "users");
  {
    // Long lists are checked a block at a time: a repeat at every pair around the first block
    // boundaries, and a bad cap past the first block, are still found and named.
    auto big_points = test::uniform_square(3000, 100, 2);
    auto big = test::make_fleet(big_points, 2, 1.0, 2);
    BudgetMirror big_mirror(big.size(), big.initial_budget());
    std::vector<UserId> ascending(2500);
    for (std::size_t k = 0; k < ascending.size(); ++k) ascending[k] = static_cast<UserId>(k);
    for (std::size_t at : {1u, 1023u, 1024u, 1025u, 2048u, 2499u}) {
      INFO("repeat at " << at);
      auto repeated = ascending;
      repeated[at] = repeated[at - 1];
      CGP_REQUIRE_ERROR(kde(big, big_mirror, p, 1, UserCharges::uniform(Charge{1e-3}, repeated), o),
                        ErrorCode::invalid_argument, "users");
    }
    std::vector<Charge> big_caps(ascending.size(), Charge{1e-3});
    big_caps[1500] = Charge{std::nan("")};
    CGP_REQUIRE_ERROR(kde(big, big_mirror, p, 1, UserCharges::per_user(ascending, big_caps), o),
                      ErrorCode::not_finite, "charge[1500]");
    big_caps[1500] = Charge{1e-3};
    big_caps[2499] = Charge{0};
    CGP_REQUIRE_ERROR(kde(big, big_mirror, p, 1, UserCharges::per_user(ascending, big_caps), o),
                      ErrorCode::not_positive, "charge[2499]");
  }
  CGP_REQUIRE_ERROR(threshold(fleet, mirror, 0, 0.5, 10, Charge{0}, o), ErrorCode::not_positive,
                    "charge");
  o.beta = 1.5;
  CHECK(kde(fleet, mirror, p, 1, rho, o).error().parameter == "beta");
  o.beta = 0.1;
  o.rounds = 0;
  o.method = Method::PM1;
  CHECK(kde(fleet, mirror, p, 1, rho, o).error().parameter == "c");
  const double p3[3] = {1, 1, 1};
  o.rounds = 4;
  CHECK(kde(fleet, mirror, p3, 1, rho, o).error().code == ErrorCode::dimension_mismatch);
  CHECK(parse_method("pm1").value() == Method::PM1);
  CHECK(parse_method("XM2").error().parameter == "method");
}

TEST_CASE("KDE and kNN: PM saves budget at the error of BM", "[coordinator][queries][savings]") {
  CGP_SEEDED(4008);
  auto points = test::uniform_square(4000, 20000, seed);
  const double p[2] = {10000, 10000};
  const double truth_kde = exact_kde(points, 2, p, 1000);
  KnnOracle oracle(points, 2);
  const auto truth_knn = oracle.nearest(p, 8);
  const double truth_distance = sum_of_distances(points, 2, p, truth_knn);
  double kde_error[4] = {}, kde_saving[4] = {}, knn_error[4] = {}, knn_saving[4] = {};
  const int reps = 20;
  for (int rep = 0; rep < reps; ++rep) {
    for (int m = 0; m < 4; ++m) {
      // Capacity for the four methods' queries; every round's ρ is ≥ capacity·2^-18.
      auto fleet = test::make_fleet(points, 2, 1e-2, seed + static_cast<std::uint64_t>(rep));
      BudgetMirror mirror(fleet.size(), fleet.initial_budget());
      auto rho = test::charge_everyone(1e-3);
      auto density = kde(fleet, mirror, p, 1000, rho,
                         options_for(kAllMethods[m], 8, "kde" + std::to_string(rep)));
      REQUIRE(density.has_value());
      kde_error[m] += l1_error(density->estimate, truth_kde) / reps;
      kde_saving[m] += privacy_saving(density->report.charged, 1e-3) / reps;
      auto nearest = knn(fleet, mirror, p, 8, rho,
                         options_for(kAllMethods[m], 8, "knn" + std::to_string(rep)));
      REQUIRE(nearest.has_value());
      knn_error[m] +=
          distance_error(sum_of_distances(points, 2, p, nearest->neighbours), truth_distance) /
          reps;
      knn_saving[m] += privacy_saving(nearest->report.charged, 1e-3) / reps;
    }
  }
  INFO("KDE l1 " << kde_error[0] << " " << kde_error[1] << " " << kde_error[2] << " "
                 << kde_error[3] << " savings " << kde_saving[2] << " " << kde_saving[3]);
  INFO("kNN DistErr " << knn_error[0] << " " << knn_error[1] << " " << knn_error[2] << " "
                      << knn_error[3] << " savings " << knn_saving[2] << " " << knn_saving[3]);
  for (int m : {2, 3}) {
    CHECK(kde_saving[m] > 0.3);  // most users are beyond 6b = 6 km of the centre
    CHECK(knn_saving[m] > 0.3);
    CHECK(kde_error[m] <= kde_error[m - 2] * 1.5 + 1e-4);
    CHECK(knn_error[m] <= knn_error[m - 2] * 1.5 + 0.05);
  }
}
