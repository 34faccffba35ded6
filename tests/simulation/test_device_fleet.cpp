#include <catch2/catch.hpp>
#include <numeric>

#include <cmath>

#include "cgp/coordinator/queries.hpp"
#include "cgp/simulation/device_fleet.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "fleet_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;

TEST_CASE("the same queries run over real Devices", "[coordinator][device-fleet]") {
  CGP_SEEDED(8001);
  auto points = test::uniform_square(1500, 10000, seed);
  double lo[2] = {2000, 2000}, hi[2] = {6000, 5000};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  const double p[2] = {5000, 5000};
  KnnOracle oracle(points, 2);
  for (Method method : {Method::BM0, Method::BM1, Method::PM0, Method::PM1}) {
    INFO("method " << method_name(method));
    auto fleet = *DeviceFleet::create(*DeviceConfig::cgp(1e5), points, 2, seed, 2);
    BudgetMirror mirror(fleet.size(), fleet.initial_budget());
    auto rho = test::charge_everyone(1e3);  // σ ≈ 2 cm: exact answers
    QueryOptions o;
    o.method = method;
    o.rounds = 4;
    o.query_id = "devices";
    auto count = range_count(fleet, mirror, range, rho, o);
    REQUIRE(count.has_value());
    CHECK(count->estimate == static_cast<double>(exact_count(points, 2, range)));
    o.query_id = "devices-knn";
    auto nearest = knn(fleet, mirror, p, 5, rho, o);
    REQUIRE(nearest.has_value());
    CHECK(nearest->neighbours == oracle.nearest(p, 5));
    for (UserId u = 0; u < fleet.size(); ++u)
      CHECK(fleet.device(u).spent() ==
            Approx(count->report.charged[u].value() + nearest->report.charged[u].value())
                .epsilon(1e-12));
  }
}

TEST_CASE("a device fleet replays a repeated round without new noise or charge",
          "[coordinator][device-fleet]") {
  CGP_SEEDED(8002);
  auto points = test::uniform_square(50, 1000, seed);
  auto fleet = *DeviceFleet::create(*DeviceConfig::cgp(1.0), points, 2, seed, 1);
  std::vector<UserId> users(50);
  std::iota(users.begin(), users.end(), UserId{0});
  std::vector<double> rho(50, 1e-3);
  RoundRequest request;
  request.query_id = "replay";
  request.users = users;
  request.rho = rho;
  RoundReplies first, second;
  fleet.ask(request, first);
  const double spent = fleet.device(0).spent();
  fleet.ask(request, second);
  CHECK(first.values == second.values);
  CHECK(fleet.device(0).spent() == spent);
}

TEST_CASE("device fleets refuse beyond the budget and the mirror stops asking",
          "[coordinator][device-fleet]") {
  CGP_SEEDED(8003);
  auto points = test::uniform_square(200, 1000, seed);
  auto fleet = *DeviceFleet::create(*DeviceConfig::cgp(1e-3), points, 2, seed, 1);
  BudgetMirror mirror(fleet.size(), fleet.initial_budget());
  auto rho = test::charge_everyone(6e-4);
  double lo[2] = {0, 0}, hi[2] = {500, 500};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  QueryOptions o;
  o.method = Method::BM1;
  o.query_id = "first";
  REQUIRE(range_count(fleet, mirror, range, rho, o).has_value());
  o.query_id = "second";
  auto second = range_count(fleet, mirror, range, rho, o);
  REQUIRE(second.has_value());
  CHECK(second->report.refused.size() == fleet.size());  // the mirror knew: nobody was asked
  for (UserId u = 0; u < fleet.size(); ++u) CHECK(fleet.device(u).spent() <= 1e-3);
}

TEST_CASE("fleets reject bad points by name", "[coordinator][fleet]") {
  const auto config = *DeviceConfig::cgp(1.0);
  std::vector<double> odd{1, 2, 3}, nan_point{1, NAN}, empty;
  CHECK(SimulatedFleet::create(config, odd, 2, 1).error().parameter == "points");
  CHECK(DeviceFleet::create(config, odd, 2, 1).error().code == ErrorCode::dimension_mismatch);
  CHECK(SimulatedFleet::create(config, nan_point, 2, 1).error().parameter == "points[1]");
  CHECK(DeviceFleet::create(config, empty, 2, 1).error().parameter == "points");
  CHECK(SimulatedFleet::create(config, odd, 0, 1).error().parameter == "dimension");
}

TEST_CASE("record_reply: the one mapping from a device reply to a round's slot", "[coordinator]") {
  RoundReplies round;
  round.resize(5, 2);
  auto reply = [](ReplyStatus status, std::vector<double> values) {
    DeviceReply r;
    r.status = status;
    r.values = std::move(values);
    r.charged_rho = status == ReplyStatus::answered ? 0.25 : 0;
    r.remaining_budget = 0.5;
    return r;
  };
  record_reply(reply(ReplyStatus::answered, {1, 2}), 0, round);
  record_reply(reply(ReplyStatus::refused_budget, {}), 1, round);
  record_reply(reply(ReplyStatus::rejected_invalid, {}), 2, round);
  // Answers the engine cannot use stay no_answer: charged in the worst case by the mirror.
  record_reply(reply(ReplyStatus::answered, {1}), 3, round);
  record_reply(reply(ReplyStatus::answered, {1, std::nan("")}), 4, round);
  CHECK(round.kind[0] == ReplyKind::answered);
  CHECK(round.values[0] == 1);
  CHECK(round.values[1] == 2);
  CHECK(round.charged[0].value() == 0.25);
  CHECK(round.kind[1] == ReplyKind::refused);
  CHECK(round.kind[2] == ReplyKind::rejected);
  CHECK(round.kind[3] == ReplyKind::no_answer);
  CHECK(round.kind[4] == ReplyKind::no_answer);
  for (std::size_t k = 0; k < 5; ++k) CHECK(round.remaining[k] == 0.5);
}
