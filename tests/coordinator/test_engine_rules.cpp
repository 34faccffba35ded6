// The engine's rules over the coordinator's own test fleet (scripted_fleet.hpp): what the
// budget mirror charges for answers, lost replies and requests that never left; that it asks
// nobody beyond what it shows left; and the elimination's arithmetic on exact answers.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>

#include "cgp/coordinator/budget_mirror.hpp"
#include "cgp/coordinator/charges.hpp"
#include "cgp/coordinator/queries.hpp"
#include "scripted_fleet.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using cgp::test::ScriptedFleet;

namespace {

// n points on a 10 × 10 m grid's centres, row-major: exact counts are easy to state.
std::vector<double> grid_points(std::size_t side) {
  std::vector<double> points;
  for (std::size_t i = 0; i < side; ++i)
    for (std::size_t j = 0; j < side; ++j) {
      points.push_back(10.0 * static_cast<double>(i) + 5);
      points.push_back(10.0 * static_cast<double>(j) + 5);
    }
  return points;
}

geometry::Region box_of(double x0, double y0, double x1, double y1) {
  const double lo[2] = {x0, y0}, hi[2] = {x1, y1};
  return *geometry::Box::create(lo, hi);
}

QueryOptions options_for(Method method, const char* id) {
  QueryOptions o;
  o.method = method;
  o.rounds = 4;
  o.shift = false;  // count ỹ < 0: with exact answers, the count is the truth
  o.query_id = id;
  return o;
}

}  // namespace

TEST_CASE("engine: a lost reply is charged in the worst case, an undelivered request not at all") {
  ScriptedFleet fleet(grid_points(6), 2, 1.0);
  fleet.set(3, ScriptedFleet::Behaviour::silent_after_charge);
  fleet.set(5, ScriptedFleet::Behaviour::out_of_reach);
  BudgetMirror mirror(fleet.size(), fleet.initial_budget());
  const auto box = box_of(0, 0, 30, 30);
  const Charge cap{0.1};
  auto counted = range_count(fleet, mirror, box, UserCharges::everyone(cap),
                             options_for(Method::PM1, "lost-replies"));
  REQUIRE(counted.has_value());
  const QueryReport& report = counted->report;

  // The device that never got a request: charged nothing anywhere, reported as not reached.
  CHECK(fleet.asked(5) == 0);
  CHECK(fleet.spent(5) == 0);
  CHECK(report.charged[5].value() == 0);
  CHECK(mirror.remaining(5) == fleet.initial_budget());
  CHECK(std::count(report.not_reached.begin(), report.not_reached.end(), 5u) == 1);
  // The device whose replies were lost after it charged: unanswered, and the mirror charged it
  // at least what its ledger holds.
  CHECK(fleet.spent(3) > 0);
  CHECK(std::count(report.unanswered.begin(), report.unanswered.end(), 3u) == 1);
  CHECK(mirror.remaining(3) <= fleet.initial_budget() - fleet.spent(3));
  // Everyone: the mirror is never above a ledger, no query charges more than its cap, and an
  // answering device's report charge is exactly what it spent.
  for (UserId u = 0; u < fleet.size(); ++u) {
    INFO("user " << u);
    CHECK(mirror.remaining(u) <= fleet.initial_budget() - fleet.spent(u));
    CHECK(fleet.spent(u) <= cap.value());
    if (u != 3 && u != 5) CHECK(report.charged[u].value() == fleet.spent(u));
  }
}

TEST_CASE("engine: the mirror asks nobody beyond what it shows left, query after query") {
  ScriptedFleet fleet(grid_points(5), 2, 0.25);
  BudgetMirror mirror(fleet.size(), fleet.initial_budget());
  const auto box = box_of(0, 0, 20, 50);
  std::size_t refusals_reported = 0;
  for (int q = 0; q < 4; ++q) {  // 4 queries of cap 0.1 against budgets of 0.25
    auto counted = range_count(fleet, mirror, box, UserCharges::everyone(Charge{0.1}),
                               options_for(Method::PM0, q % 2 ? "odd" : "even"));
    REQUIRE(counted.has_value());
    refusals_reported += counted->report.refused.size();
  }
  // Budgets ran out (the last queries found users spent) ...
  CHECK(refusals_reported > 0);
  for (UserId u = 0; u < fleet.size(); ++u) {
    INFO("user " << u);
    // ... yet no device was ever sent a request it had to refuse: every refusal was the
    // mirror's own, before anything left.
    CHECK(fleet.spent(u) <= fleet.initial_budget());
    CHECK(mirror.remaining(u) <= fleet.initial_budget() - fleet.spent(u) + 1e-15);
  }
  CHECK(fleet.device_refusals() == 0);
}

TEST_CASE("engine: with exact answers, counts and nearest neighbours are exact") {
  CGP_SEEDED(7);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> coordinate(0, 100);
  std::vector<double> points(2 * 200);
  for (double& v : points) v = coordinate(rng);
  const auto box = box_of(20, 30, 70, 60);
  std::size_t truth = 0;
  for (std::size_t u = 0; u < 200; ++u)
    truth += geometry::inside(box, std::span<const double>(points.data() + 2 * u, 2)) ? 1 : 0;

  for (Method method : {Method::BM0, Method::PM0}) {
    INFO("method " << method_name(method));
    ScriptedFleet fleet(points, 2, 10.0);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    auto counted = range_count(fleet, mirror, box, UserCharges::everyone(Charge{0.5}),
                               options_for(method, "exact-count"));
    REQUIRE(counted.has_value());
    CHECK(counted->estimate == static_cast<double>(truth));
  }

  ScriptedFleet fleet(points, 2, 10.0);
  BudgetMirror mirror(fleet.size(), fleet.initial_budget());
  const double p[2] = {50, 50};
  auto nearest = knn(fleet, mirror, p, 5, UserCharges::everyone(Charge{0.5}),
                     options_for(Method::PM1, "exact-knn"));
  REQUIRE(nearest.has_value());
  std::vector<UserId> order(200);
  std::iota(order.begin(), order.end(), 0u);
  auto distance = [&](UserId u) { return std::hypot(points[2 * u] - 50, points[2 * u + 1] - 50); };
  std::stable_sort(order.begin(), order.end(),
                   [&](UserId a, UserId b) { return distance(a) < distance(b); });
  order.resize(5);
  CHECK(nearest->neighbours == order);
}

TEST_CASE("engine: users added to the mirror start with the whole budget, the others keep theirs") {
  // A coordinator that follows its enrolment grows its mirror; a grown mirror must never have
  // raised a user it charged before (the mirror is a worst case and never optimistic).
  BudgetMirror mirror(2, 1.0);
  mirror.update_with_charge(0, ReplyKind::answered, Charge{0.6}, Charge{0.6}, 0.4);
  const double charged = mirror.remaining(0);
  REQUIRE(charged <= 0.4);
  mirror.add_users(3);
  CHECK(mirror.size() == 5);
  CHECK(mirror.remaining(0) == charged);
  CHECK(mirror.remaining(1) == 1.0);
  for (UserId u = 2; u < 5; ++u) CHECK(mirror.remaining(u) == 1.0);
  // A new user whose id was charged in an earlier run: its kept value lowers it, never raises.
  mirror.restore(3, 0.25);
  CHECK(mirror.remaining(3) == 0.25);
  mirror.restore(3, 0.75);
  CHECK(mirror.remaining(3) == 0.25);
  CHECK_FALSE(mirror.can_pay(3, Charge{0.3}));
  CHECK(mirror.can_pay(4, Charge{0.3}));
}
