#include <catch2/catch.hpp>
#include <cmath>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/coordinator/adaptive_budget.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "fleet_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;

TEST_CASE("Alg. 3 schedule: B/m without savings, savings flow to later queries",
          "[coordinator][budgeting]") {
  const double B = 1.0;
  auto plan = *AdaptiveBudget::fixed(B, 4);
  BudgetMirror mirror(3, B);
  auto first = plan.allocate(1, mirror);
  for (double r : first) CHECK(r == Approx(B / 4));
  // User 0 spent its share, user 1 spent nothing, user 2 spent everything.
  mirror.update_with_charge(0, ReplyKind::answered, Charge{0.25}, Charge{0.25}, 0.75);
  mirror.update_with_charge(2, ReplyKind::answered, Charge{1.0}, Charge{1.0}, 0.0);
  auto second = plan.allocate(2, mirror);
  CHECK(second[0] == Approx(B / 4));                            // on plan: B/m
  CHECK(second[1] == Approx((0.75 + 0.25 / 3) * 0.25 + 0.25));  // γ₂·saving + B/m
  CHECK(second[2] == 0);                                        // nothing left
  auto last = plan.allocate(4, mirror);
  CHECK(last[1] == Approx(1.0));  // γ_m = 1: everything left
  CHECK(AdaptiveBudget::fixed(0, 4).error().parameter == "budget");
  CHECK(AdaptiveBudget::fixed(1, 0).error().parameter == "m");
  auto open = *AdaptiveBudget::open_ended(B, 10);
  CHECK(open.allocate(1, mirror)[1] == Approx(0.1));
  // Past the horizon: B/H plus 3/4 of everything left, capped to what is left.
  CHECK(open.allocate(20, mirror)[1] == Approx(0.1 + 0.75));
}

TEST_CASE("an Alg. 3 run never charges a user more than its budget, and PM saves for later",
          "[coordinator][budgeting]") {
  CGP_SEEDED(7001);
  auto points = test::uniform_square(3000, 20000, seed);
  const double B = 1e-3;
  const std::size_t m = 8;
  std::vector<geometry::Region> ranges;
  for (std::size_t l = 0; l < m; ++l) {
    double lo[2] = {2000.0 * static_cast<double>(l), 5000},
           hi[2] = {2000.0 * static_cast<double>(l) + 3000, 8000};
    ranges.emplace_back(*geometry::Box::create(lo, hi));
  }
  double mean_error[2] = {0, 0};
  for (int method = 0; method < 2; ++method) {
    auto fleet = test::make_fleet(points, 2, B, seed);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    QueryOptions options;
    options.method = method == 0 ? Method::BM1 : Method::PM1;
    options.rounds = 8;
    options.query_id = "alg3";
    auto results =
        adaptive_range_counts(fleet, mirror, *AdaptiveBudget::fixed(B, m), ranges, options);
    REQUIRE(results.has_value());
    REQUIRE(results->size() == m);
    for (UserId u = 0; u < fleet.size(); ++u) CHECK(fleet.spent(u) <= B);
    for (std::size_t l = 0; l < m; ++l)
      mean_error[method] += count_error((*results)[l].estimate,
                                        static_cast<double>(exact_count(points, 2, ranges[l]))) /
                            m;
    // Savings carried over: after m − 1 queries, what query m may ask of a user.
    {
      auto replay = test::make_fleet(points, 2, B, seed);
      BudgetMirror before_last(replay.size(), replay.initial_budget());
      auto plan = *AdaptiveBudget::fixed(B, m);
      REQUIRE(
          adaptive_range_counts(replay, before_last, plan, std::span(ranges).first(m - 1), options)
              .has_value());
      auto last = plan.allocate(m, before_last);
      double mean_last = 0;
      for (double r : last) mean_last += r / static_cast<double>(last.size());
      INFO("method " << method << " mean allocation of the last query " << mean_last);
      if (method == 0)
        CHECK(mean_last == Approx(B / m).epsilon(0.05));  // BM: on plan
      else
        CHECK(mean_last > 2 * B / m);  // PM: savings flow
    }
  }
  INFO("mean CountErr BM1 " << mean_error[0] << " PM1 " << mean_error[1]);
  CHECK(mean_error[1] <= mean_error[0] * 1.2 + 0.01);
}
