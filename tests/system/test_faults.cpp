// The network under faults: an async swarm of devices, devices dropped mid-round and
// reconnecting, devices slower than the round deadline. Whatever happens, a query completes and
// reports who did not answer, no device is charged twice for one request, none above its
// budget, and the coordinator's mirror never thinks a device has more budget than it has.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/simulation/device_fleet.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/gateway.hpp"
#include "network_fixtures.hpp"
#include "simulation/fleet_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;
using namespace std::chrono_literals;

using test::device_ids;
using test::eventually;

TEST_CASE("swarm: an async swarm gives the same seeded result as the in-process fleet",
          "[transport][swarm]") {
  CGP_SEEDED(9201);
  const std::size_t n = 400;
  auto points = test::uniform_square(n, 2000, seed);
  const auto config = *DeviceConfig::cgp(1.0);
  double lo[2] = {500, 500}, hi[2] = {1500, 1500};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  auto rho = test::charge_everyone(1e-3);
  QueryOptions options;
  options.method = Method::PM1;
  options.rounds = 4;
  options.query_id = "swarm-parity";

  auto local = *DeviceFleet::create(config, points, 2, seed, 1);
  BudgetMirror local_mirror(n, local.initial_budget());
  auto expected = *range_count(local, local_mirror, range, rho, options);

  auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = "127.0.0.1:" + std::to_string(gateway->port());
  swarm_options.config = config;
  swarm_options.seed = seed;
  swarm_options.streams_per_connection = 150;  // three connections
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, test::swarm_members(points, n));
  REQUIRE(gateway->wait_for_devices(n, 30s));
  REQUIRE(swarm->wait_connected(n, 30s));
  transport::NetworkFleet fleet(*gateway, device_ids(n), 2, 1.0, 20s);
  BudgetMirror mirror(n, fleet.initial_budget());
  auto result = range_count(fleet, mirror, range, rho, options);
  REQUIRE(result.has_value());
  CHECK(result->estimate == expected.estimate);
  CHECK(result->report.charged == expected.report.charged);
  CHECK(result->report.unanswered.empty());
  // The swarm counts a reply when its write completes, which may be just after it arrived.
  CHECK(eventually([&] { return swarm->counters().replies == gateway->counters().replies; }));
  swarm.reset();
  CHECK(eventually([&] { return gateway->connected() == 0; }));
}

TEST_CASE("faults: dropped, reconnecting and slow devices: each request charged once",
          "[transport][faults]") {
  CGP_SEEDED(9202);
  const std::size_t fast = 40, slow = 3, n = fast + slow;
  auto points = test::uniform_square(n, 1000, seed);
  const auto config = *DeviceConfig::cgp(1.0);
  // Slow devices: they answer 1.5 s after each request, the round deadline is 0.4 s.
  test::MixedFleet net(config, points, seed, fast, slow, 1500ms);
  auto& gateway = net.gateway;
  auto& swarm = net.swarm;
  transport::NetworkFleet fleet(*gateway, device_ids(n), 2, 1.0, 400ms);
  auto spent = [&](std::size_t i) { return net.spent(i); };

  std::vector<UserId> users(n);
  std::iota(users.begin(), users.end(), UserId{0});
  const std::vector<double> rho(n, 0.01);
  RoundRequest request;
  request.query_id = "faults";
  request.round = 1;
  request.statistic = StatisticKind::location;
  request.users = users;
  request.rho = rho;

  // Round 1: ten devices are cut off while the round waits for the slow ones.
  RoundReplies first;
  // (Catch's assertions are not thread-safe: the dropper reports, the test thread checks.)
  std::atomic<bool> reached{false};
  std::jthread dropper([&] {
    reached = eventually([&] { return swarm->counters().requests >= fast; });
    for (std::size_t i = 0; i < 10; ++i) swarm->drop(i);
  });
  fleet.ask(request, first);
  dropper.join();
  REQUIRE(reached);
  for (std::size_t i = fast; i < n; ++i) CHECK(first.kind[i] == ReplyKind::no_answer);
  for (std::size_t i = 10; i < fast; ++i) CHECK(first.kind[i] == ReplyKind::answered);
  // What one request cost a device that certainly answered; every device got the request
  // before anything was dropped, so each spent it exactly once.
  const double charge = spent(fast - 1);
  CHECK(charge >= first.charged[fast - 1].value());
  CHECK(charge < 2 * first.charged[fast - 1].value());
  for (std::size_t i = 0; i < fast; ++i) CHECK(spent(i) == charge);

  // The dropped devices reconnect; the slow devices' late replies have arrived meanwhile.
  REQUIRE(eventually([&] { return swarm->connected() == fast - 10; }));
  for (std::size_t i = 0; i < 10; ++i) REQUIRE(swarm->reconnect(i));
  REQUIRE(swarm->wait_connected(fast, 30s));
  REQUIRE(gateway->wait_for_devices(n, 30s));
  REQUIRE(eventually([&] { return gateway->counters().late_replies >= slow; }));
  for (std::size_t i = fast; i < n; ++i) CHECK(spent(i) == charge);

  // The coordinator retries the same round: cached answers, identical values, no new charge.
  RoundReplies second;
  transport::NetworkFleet patient(*gateway, device_ids(n), 2, 1.0, 10s);
  patient.ask(request, second);
  for (std::size_t i = 0; i < n; ++i) {
    INFO("device " << i);
    CHECK(second.kind[i] == ReplyKind::answered);
    CHECK(spent(i) == charge);
    if (first.kind[i] == ReplyKind::answered)
      for (std::size_t j = 0; j < 2; ++j)
        CHECK(second.values[2 * i + j] == first.values[2 * i + j]);
  }
}

TEST_CASE("faults: a range query completes through drops and slow devices, the mirror stays safe",
          "[transport][faults]") {
  CGP_SEEDED(9203);
  const std::size_t fast = 60, slow = 2, n = fast + slow;
  auto points = test::uniform_square(n, 1000, seed);
  const auto config = *DeviceConfig::cgp(0.05);
  test::MixedFleet net(config, points, seed, fast, slow, 800ms);
  auto& gateway = net.gateway;
  auto& swarm = net.swarm;
  transport::NetworkFleet fleet(*gateway, device_ids(n), 2, 0.05, 300ms);
  BudgetMirror mirror(n, fleet.initial_budget());
  auto rho = test::charge_everyone(0.05);  // the whole budget: a second charge could not fit
  QueryOptions options;
  options.method = Method::PM1;
  options.rounds = 4;
  options.query_id = "faulty-range";
  double lo[2] = {200, 200}, hi[2] = {700, 700};
  // Devices 0..14 die as soon as the first round reaches them.
  std::atomic<bool> reached{false};
  std::jthread dropper([&] {
    reached = eventually([&] { return swarm->counters().requests >= 1; });
    for (std::size_t i = 0; i < 15; ++i) swarm->drop(i);
  });
  auto result = range_count(fleet, mirror, *geometry::Box::create(lo, hi), rho, options);
  dropper.join();
  REQUIRE(reached);
  REQUIRE(result.has_value());
  for (UserId u = fast; u < n; ++u)
    CHECK(std::count(result->report.unanswered.begin(), result->report.unanswered.end(), u) == 1);
  for (UserId u = 0; u < n; ++u) {
    INFO("user " << u);
    const double device_spent = net.spent(u);
    CHECK(device_spent <= config.rho_capacity());
    CHECK(mirror.remaining(u) <= config.rho_capacity() - device_spent + 1e-12);
  }
}

TEST_CASE("faults: after a coordinator restart devices reconnect with their budgets intact",
          "[transport][faults]") {
  CGP_SEEDED(9204);
  const std::size_t n = 50;
  auto points = test::uniform_square(n, 1000, seed);
  transport::CoordinatorOptions options;
  for (std::size_t i = 0; i < n; ++i) options.device_ids.push_back("device-" + std::to_string(i));
  options.device_budget = 1.0;
  auto service = *transport::CoordinatorService::start(options);
  const int port = service->port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0);
  swarm_options.seed = seed;
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, test::swarm_members(points, n));
  REQUIRE(service->gateway().wait_for_devices(n, 30s));

  double lo[2] = {0, 0}, hi[2] = {600, 600};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  QueryOptions query;
  query.method = Method::BM1;
  query.query_id = "";  // the coordinator's id
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
  auto first =
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.4}), query);
  REQUIRE(first.has_value());
  CHECK(first->coverage.answered == n);
  std::vector<double> spent_before(n);
  for (std::size_t i = 0; i < n; ++i) {
    spent_before[i] = swarm->spent(i);
    CHECK(spent_before[i] > 0.4 * 0.999);
  }

  // The coordinator goes down and comes back on the same port, with a fresh mirror.
  service.reset();
  options.gateway.address = address;
  service = *transport::CoordinatorService::start(options);
  REQUIRE(service->gateway().wait_for_devices(n, 30s));
  for (std::size_t i = 0; i < n; ++i) CHECK(swarm->spent(i) == spent_before[i]);

  // The new coordinator does not know what was spent; the devices do. Asking 0.4 twice more:
  // the first fits (0.8 ≤ 1), the second is refused by every device and charges nothing.
  // The first one gets an id from the new coordinator (ids once restarted at q1,
  // so a different query under an old id was rejected by every device as request_conflict and
  // came back as an estimate of 0).
  auto again = *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
  double lo2[2] = {100, 100}, hi2[2] = {900, 900};
  auto second = again.range_count(*geometry::Box::create(lo2, hi2),
                                  analyst::RemoteCharges::fixed(coordinator::Charge{0.4}), query);
  REQUIRE(second.has_value());
  CHECK(second->query_id != first->query_id);
  CHECK(second->report.refused.empty());
  CHECK(second->report.rejected.empty());
  CHECK(second->coverage.valid);
  // Refused by every device: not an estimate but a named error; the result
  // with its coverage can still be read.
  query.query_id = "after-2";
  auto third =
      again.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.4}), query);
  REQUIRE_FALSE(third.has_value());
  CHECK(third.error().code == ErrorCode::incomplete_query);
  CHECK(third.error().parameter == "min_coverage");
  auto kept = again.result("after-2");
  REQUIRE(kept.has_value());
  CHECK(kept->report.refused.size() == n);
  CHECK(kept->coverage.answered == 0);
  CHECK_FALSE(kept->coverage.valid);
  // An analyst who accepts any coverage gets the result, and sees it.
  // Refused users are expected here: neither coverage nor their share of the answer is checked.
  auto lenient = *analyst::AnalystClient::connect({address, "", "", 30s, 0.0, 1.0});
  query.query_id = "after-3";
  auto fourth =
      lenient.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.4}), query);
  REQUIRE(fourth.has_value());
  CHECK(fourth->coverage.refused == n);
  CHECK(fourth->coverage.min_coverage == 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(swarm->spent(i) <= 1.0);
    CHECK(swarm->spent(i) > 0.8 * 0.999);
  }
  swarm.reset();
}
