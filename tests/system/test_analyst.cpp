// The coordinator as a service: analysts submit queries over gRPC; the coordinator runs them
// over devices connected to it (here an async swarm) with the same query code as in-process.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <thread>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/common/wire/codec.hpp"
#include "cgp/coordinator/accuracy_first.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/coordinator/top_regions.hpp"
#include "cgp/simulation/device_fleet.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/v1/analyst.grpc.pb.h"
#include "network_fixtures.hpp"
#include "simulation/fleet_fixtures.hpp"
#include "support/errors.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;
using namespace std::chrono_literals;

namespace {

struct LiveCoordinator {
  std::unique_ptr<transport::CoordinatorService> service;
  std::unique_ptr<swarm::DeviceSwarm> swarm;
  std::string address;

  LiveCoordinator(const std::vector<double>& points, std::size_t n, double budget,
                  std::uint64_t seed, const std::string& analyst_secret) {
    transport::CoordinatorOptions options;
    for (std::size_t i = 0; i < n; ++i) options.device_ids.push_back("device-" + std::to_string(i));
    options.device_budget = budget;
    options.horizon = 10;
    options.analyst_credential_sha256 = transport::sha256_of(analyst_secret);
    service = *transport::CoordinatorService::start(options);
    address = "127.0.0.1:" + std::to_string(service->port());
    swarm::SwarmOptions swarm_options;
    swarm_options.coordinator_address = address;
    swarm_options.config = *DeviceConfig::cgp(budget);
    swarm_options.seed = seed;
    std::vector<swarm::SwarmMember> members;
    for (std::size_t i = 0; i < n; ++i)
      members.push_back({options.device_ids[i], "", {points[2 * i], points[2 * i + 1]}});
    swarm = *swarm::DeviceSwarm::start(swarm_options, std::move(members));
    REQUIRE(service->gateway().wait_for_devices(n, 30s));
  }
  ~LiveCoordinator() {
    swarm.reset();
    service.reset();
  }
};

// A RangeCount sent by hand, as a client other than ours could: the status and the
// cgp-error-code trailer.
struct SentByHand {
  grpc::Status status;
  std::string error_code;
};
SentByHand send_by_hand(const std::string& address, const v1::RangeCountQuery& query) {
  auto stub =
      v1::Analyst::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata("cgp-analyst-credential", "right");
  context.set_deadline(std::chrono::system_clock::now() + 30s);
  v1::QueryResult result;
  SentByHand out;
  out.status = stub->RangeCount(&context, query, &result);
  auto code = context.GetServerTrailingMetadata().find("cgp-error-code");
  if (code != context.GetServerTrailingMetadata().end())
    out.error_code.assign(code->second.data(), code->second.size());
  return out;
}

}  // namespace

TEST_CASE("analyst: queries over a live coordinator match the in-process fleet",
          "[transport][analyst]") {
  CGP_SEEDED(9301);
  const std::size_t n = 300;
  auto points = test::uniform_square(n, 2000, seed);
  const double budget = 1.0;
  LiveCoordinator live(points, n, budget, seed, "analyst-secret");
  auto analyst = *analyst::AnalystClient::connect(
      {live.address, "analyst-secret", "", 60s, std::nullopt, std::nullopt});

  double lo[2] = {400, 400}, hi[2] = {1400, 1400};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  QueryOptions options;
  options.method = Method::PM1;
  options.rounds = 4;
  options.query_id = "parity";
  const double rho = 0.01;

  auto local = *DeviceFleet::create(*DeviceConfig::cgp(budget), points, 2, seed, 1);
  BudgetMirror local_mirror(n, local.initial_budget());
  auto expected = *range_count(local, local_mirror, range, test::charge_everyone(rho), options);

  auto remote =
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{rho}), options);
  REQUIRE(remote.has_value());
  CHECK(remote->query_id == "parity");
  CHECK(remote->estimate == expected.estimate);
  CHECK(remote->report.charged == expected.report.charged);
  CHECK(remote->report.rounds_used == expected.report.rounds_used);
  CHECK(remote->report.unanswered.empty());

  // Results can be read back; an id cannot be reused.
  auto again = analyst.result("parity");
  REQUIRE(again.has_value());
  CHECK(again->estimate == remote->estimate);
  CGP_REQUIRE_ERROR(
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{rho}), options),
      ErrorCode::already_exists, "query_id");
  CGP_REQUIRE_ERROR(analyst.result("never-ran"), ErrorCode::invalid_argument, "query_id");

  // KDE and kNN; the coordinator names its query ids when the analyst gives none.
  QueryOptions unnamed;
  unnamed.query_id = "";
  const double p[2] = {1000, 1000};
  auto density =
      analyst.kde(p, 300, analyst::RemoteCharges::fixed(coordinator::Charge{0.05}), unnamed);
  REQUIRE(density.has_value());
  CHECK(std::isfinite(density->estimate));
  CHECK_FALSE(density->query_id.empty());
  auto nearest =
      analyst.knn(p, 5, analyst::RemoteCharges::fixed(coordinator::Charge{0.05}), unnamed);
  REQUIRE(nearest.has_value());
  REQUIRE(nearest->neighbours.size() == 5);
  for (std::size_t j = 0; j < 5; ++j)
    CHECK(nearest->neighbour_ids[j] == "device-" + std::to_string(nearest->neighbours[j]));

  // Adaptive allocation (ρ = 0): each user gets at most its share of the open-ended plan.
  auto adaptive = analyst.range_count(range, analyst::RemoteCharges::adaptive(), unnamed);
  REQUIRE(adaptive.has_value());
  double most = 0;
  for (double c : coordinator::charge_values(adaptive->report.charged)) most = std::max(most, c);
  CHECK(most > 0);
  CHECK(most <= budget);

  auto status = analyst.status();
  REQUIRE(status.has_value());
  CHECK(status->enrolled == n);
  CHECK(status->connected == n);
  CHECK(status->queries == 4);
  CHECK(status->unanswered == 0);
}

TEST_CASE("analyst: adaptive queries go on after a device reports nothing left",
          "[transport][analyst]") {
  // A past bug: the service kept spent users in the adaptive allocation with ρ = 0, which
  // the query rejected, so every later query without --rho failed for everyone ("not_positive:
  // rho[0]"). Here a sticky-halt device refuses a restarted coordinator (whose fresh mirror did
  // not know what it had spent) and reports 0 left for good.
  CGP_SEEDED(9304);
  const std::size_t n = 20;
  auto points = test::uniform_square(n, 1000, seed);
  transport::CoordinatorOptions options;
  for (std::size_t i = 0; i < n; ++i) options.device_ids.push_back("device-" + std::to_string(i));
  options.device_budget = 1.0;
  options.horizon = 10;
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0, /*sticky_halt=*/true);
  swarm_options.seed = seed;
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, test::swarm_members(points, n));
  REQUIRE(service->gateway().wait_for_devices(n, 30s));

  double lo[2] = {0, 0}, hi[2] = {600, 600};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  const std::vector<UserId> first_user{0};
  QueryOptions only_first;
  only_first.method = Method::BM1;  // one round: the whole charge
  only_first.query_id = "";
  {
    auto analyst =
        *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
    REQUIRE(analyst
                .range_count(range,
                             analyst::RemoteCharges::fixed(coordinator::Charge{0.6}, first_user),
                             only_first)
                .has_value());
  }
  service.reset();
  options.gateway.address = address;
  service = *transport::CoordinatorService::start(options);
  REQUIRE(service->gateway().wait_for_devices(n, 30s));
  auto analyst = *analyst::AnalystClient::connect(
      {address, "", "", 30s, std::nullopt, 1.0});  // one device refuses throughout
  // 0.6 more does not fit in 1.0: refused by the device, which halts for good.
  CGP_REQUIRE_ERROR(
      analyst.range_count(
          range, analyst::RemoteCharges::fixed(coordinator::Charge{0.6}, first_user), only_first),
      ErrorCode::incomplete_query, "min_coverage");

  QueryOptions everyone;
  everyone.query_id = "";
  for (int query = 0; query < 3; ++query) {
    auto adaptive = analyst.range_count(range, analyst::RemoteCharges::adaptive(), everyone);
    REQUIRE(adaptive.has_value());
    CHECK(adaptive->coverage.users == n);
    CHECK(adaptive->coverage.refused == 1);  // the halted device, not asked
    CHECK(adaptive->coverage.answered == n - 1);
  }
  CHECK(swarm->spent(0) <= 1.0);
  // The halted device alone, adaptively: nobody is asked, and the query fails by name.
  // Refused users are expected here: neither coverage nor their share of the answer is checked.
  auto lenient = *analyst::AnalystClient::connect({address, "", "", 30s, 0.0, 1.0});
  auto alone = lenient.range_count(range, analyst::RemoteCharges::adaptive(first_user), only_first);
  REQUIRE(alone.has_value());
  CHECK(alone->coverage.users == 1);
  CHECK(alone->coverage.refused == 1);
  CGP_REQUIRE_ERROR(
      analyst.range_count(range, analyst::RemoteCharges::adaptive(first_user), only_first),
      ErrorCode::incomplete_query, "min_coverage");
  swarm.reset();
}

TEST_CASE("analyst: unanswered users and a reused id are an incomplete query and not an estimate",
          "[transport][analyst]") {
  // On 51cfbc1 a query that most devices never answered came back as an
  // estimate with exit 0, and so did one every device rejected as a conflicting reused id.
  transport::CoordinatorOptions options;
  for (int i = 0; i < 10; ++i) options.device_ids.push_back("device-" + std::to_string(i));
  options.round_deadline = 300ms;
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0);
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, {{"device-0", "", {1, 1}}});
  REQUIRE(service->gateway().wait_for_devices(1, 30s));
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
  double lo[2] = {0, 0}, hi[2] = {10, 10};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  QueryOptions query;
  query.method = Method::BM1;
  query.query_id = "most-unanswered";
  CGP_REQUIRE_ERROR(
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.1}), query),
      ErrorCode::incomplete_query, "min_coverage");
  auto kept = analyst.result("most-unanswered");
  REQUIRE(kept.has_value());
  CHECK(kept->coverage.unanswered == 9);
  CHECK(kept->coverage.answered == 1);

  // A coordinator that lost its results (no state file) and an analyst who reuses an id the
  // device still holds in its ledger with other content: the device rejects it as a conflict.
  const std::vector<UserId> first{0};
  query.query_id = "reused";
  const auto first_only = analyst::RemoteCharges::fixed(coordinator::Charge{0.1}, first);
  REQUIRE(analyst.range_count(range, first_only, query).has_value());
  service.reset();
  options.gateway.address = address;
  service = *transport::CoordinatorService::start(options);
  REQUIRE(service->gateway().wait_for_devices(1, 30s));
  auto again = *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
  double lo2[2] = {0, 0}, hi2[2] = {20, 20};
  CGP_REQUIRE_ERROR(again.range_count(*geometry::Box::create(lo2, hi2), first_only, query),
                    ErrorCode::incomplete_query, "min_coverage");
  auto rejected = again.result("reused");
  REQUIRE(rejected.has_value());
  CHECK(rejected->coverage.rejected == 1);
  // Charged for "most-unanswered" and the first "reused", not for the conflicting one.
  CHECK(swarm->spent(0) <= 0.2 * 1.01);
  swarm.reset();
}

TEST_CASE("analyst: credentials and bad queries are refused by name, nothing is asked",
          "[transport][analyst]") {
  CGP_SEEDED(9302);
  const std::size_t n = 20;
  auto points = test::uniform_square(n, 1000, seed);
  LiveCoordinator live(points, n, 1.0, seed, "right");
  double lo[2] = {0, 0}, hi[2] = {500, 500};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  QueryOptions options;

  auto intruder = *analyst::AnalystClient::connect(
      {live.address, "wrong", "", 30s, std::nullopt, std::nullopt});
  CGP_REQUIRE_ERROR(intruder.range_count(
                        range, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), options),
                    ErrorCode::unauthenticated, "credential");
  auto anonymous =
      *analyst::AnalystClient::connect({live.address, "", "", 30s, std::nullopt, std::nullopt});
  CGP_REQUIRE_ERROR(anonymous.status(), ErrorCode::unauthenticated, "credential");

  auto analyst = *analyst::AnalystClient::connect(
      {live.address, "right", "", 30s, std::nullopt, std::nullopt});
  const double p3[3] = {1, 2, 3};
  CGP_REQUIRE_ERROR(
      analyst.kde(p3, 10, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), options),
      ErrorCode::dimension_mismatch, "p");
  // A charge the wire would read as "adaptive" or as nonsense is refused before it is sent.
  for (double bad : {-1.0, 0.0, std::nan("")})
    CGP_REQUIRE_ERROR(
        analyst.range_count(range, analyst::RemoteCharges::fixed(Charge{bad}), options),
        bad != bad ? ErrorCode::not_finite : ErrorCode::not_positive, "charge");
  options.beta = 2;
  CGP_REQUIRE_ERROR(
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), options),
      ErrorCode::out_of_range, "beta");
  options.beta = 0.1;
  {
    auto strict =
        *analyst::AnalystClient::connect({live.address, "right", "", 30s, 1.5, std::nullopt});
    CGP_REQUIRE_ERROR(strict.range_count(
                          range, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), options),
                      ErrorCode::out_of_range, "min_coverage");
  }
  options.rounds = 1000;
  CGP_REQUIRE_ERROR(
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), options),
      ErrorCode::out_of_range, "rounds");
  // A negative or NaN rho sent by hand is refused by the service by name.
  for (double bad : {-1.0, std::nan("")}) {
    v1::RangeCountQuery query;
    query.mutable_options()->set_rho(bad);
    *query.mutable_range() = wire::region_to_wire(range);
    const auto sent = send_by_hand(live.address, query);
    CHECK(sent.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(sent.status.error_message().find("rho") != std::string::npos);
  }
  // A polygon no client library would build, sent by hand: on 51cfbc1 Boost
  // threw through the handler and gRPC answered UNKNOWN. Now a named out_of_range.
  {
    v1::RangeCountQuery query;
    query.mutable_options()->set_rho(0.01);
    auto* polygon = query.mutable_range()->mutable_polygon();
    for (double v : {0.0, 0.0, 100.0, 0.0, 100.0, 100.0, 0.0, 100.0})
      polygon->mutable_outer()->add_xy(v);
    auto* hole = polygon->add_holes();
    for (double v : {10.0, 10.0, 5.9e20, 20.0, 10.0, 30.0}) hole->add_xy(v);
    const auto sent = send_by_hand(live.address, query);
    CHECK(sent.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(sent.status.error_message().find("polygon.holes[0]") != std::string::npos);
    CHECK(sent.error_code == std::to_string(static_cast<int>(ErrorCode::out_of_range)));
  }
  CHECK(live.service->gateway().counters().rounds == 0);
  for (std::size_t i = 0; i < n; ++i) CHECK(live.swarm->spent(i) == 0);
}

TEST_CASE("analyst: a threshold query over a curator device", "[transport][analyst]") {
  // The curator holds a count (1-D, sensitivity 1): 420 of a population of 1,000.
  transport::CoordinatorOptions options;
  options.device_ids = {"curator"};
  options.dimension = 1;
  options.device_budget = 100;
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(100);
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, {{"curator", "", {420}}});
  REQUIRE(service->gateway().wait_for_devices(1, 30s));
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
  QueryOptions query;
  query.method = Method::PM1;
  query.query_id = "";
  // ρ = 10 per query, 2.5 per round (c = 4): noise σ = 1/√5 ≈ 0.45 against gaps of 80 and 30,
  // so a wrong answer needs a deviation of over 60σ (probability far below 1e-100).
  auto below = analyst.threshold("curator", 0.5, 1000,
                                 analyst::RemoteCharges::fixed(coordinator::Charge{10}), query);
  REQUIRE(below.has_value());
  CHECK(below->below);
  auto above = analyst.threshold("curator", 0.39, 1000,
                                 analyst::RemoteCharges::fixed(coordinator::Charge{10}), query);
  REQUIRE(above.has_value());
  CHECK_FALSE(above->below);
  CGP_REQUIRE_ERROR(
      analyst.threshold("nobody", 0.5, 1000, analyst::RemoteCharges::fixed(coordinator::Charge{10}),
                        query),
      ErrorCode::invalid_argument, "device_id");
  swarm.reset();
}

TEST_CASE("analyst: accuracy-first range and KDE over a live coordinator match the library",
          "[transport][analyst][accuracy_first]") {
  CGP_SEEDED(9305);
  const std::size_t n = 400;
  auto points = test::uniform_square(n, 2000, seed);
  const double budget = 0.1;  // = the cap: each round's share is one a device answers
  LiveCoordinator live(points, n, budget, seed, "analyst-secret");
  auto analyst = *analyst::AnalystClient::connect(
      {live.address, "analyst-secret", "", 60s, std::nullopt, std::nullopt});
  double lo[2] = {400, 400}, hi[2] = {1400, 1400};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  analyst::RemoteAccuracy accuracy;
  accuracy.target = {0.1, 0};
  accuracy.max_rounds = 10;
  QueryOptions options;
  options.query_id = "accuracy-parity";

  // The same query on the device code in process, with the same seed.
  auto local = *DeviceFleet::create(*DeviceConfig::cgp(budget), points, 2, seed, 1);
  BudgetMirror local_mirror(n, local.initial_budget());
  AccuracyFirstOptions local_options;
  local_options.max_rounds = 10;
  local_options.query_id = "accuracy-parity";
  const auto expected = range_count_to_accuracy(
      local, local_mirror, range, test::charge_everyone(budget), {0.1, 0}, local_options);
  REQUIRE(expected.has_value());

  auto remote = analyst.range_count(
      range, analyst::RemoteCharges::fixed(coordinator::Charge{budget}), accuracy, options);
  REQUIRE(remote.has_value());
  REQUIRE(remote->certified.has_value());
  CHECK(*remote->certified == expected->certified);
  CHECK(remote->estimate == expected->estimate);
  CHECK(remote->lower == expected->lower);
  CHECK(remote->upper == expected->upper);
  CHECK(remote->report.charged == expected->report.charged);
  CHECK(remote->lower <= remote->estimate);
  CHECK(remote->estimate <= remote->upper);
  for (double c : coordinator::charge_values(remote->report.charged)) CHECK(c <= budget);
  // Read back, with its certificate.
  auto again = analyst.result("accuracy-parity");
  REQUIRE(again.has_value());
  REQUIRE(again->certified.has_value());
  CHECK(again->upper == remote->upper);

  // KDE; and plain queries carry no certificate.
  const double p[2] = {1000, 1000};
  analyst::RemoteAccuracy density_target;
  density_target.target = {0, 0.05};
  QueryOptions unnamed;
  unnamed.query_id = "";
  auto density = analyst.kde(p, 300, analyst::RemoteCharges::fixed(coordinator::Charge{0.05}),
                             density_target, unnamed);
  REQUIRE(density.has_value());
  REQUIRE(density->certified.has_value());
  CHECK(density->lower <= density->upper);
  auto plain =
      analyst.kde(p, 300, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), unnamed);
  REQUIRE(plain.has_value());
  CHECK_FALSE(plain->certified.has_value());

  // Bad targets are named errors; nothing is asked.
  const auto before = analyst.status()->requests;
  analyst::RemoteAccuracy bad = accuracy;
  bad.target = {0, 0};
  CGP_REQUIRE_ERROR(
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), bad,
                          unnamed),
      ErrorCode::invalid_argument, "target");
  bad = accuracy;
  bad.growth = 1;
  CGP_REQUIRE_ERROR(
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), bad,
                          unnamed),
      ErrorCode::out_of_range, "growth");
  CHECK(analyst.status()->requests == before);
}

TEST_CASE("analyst: top regions over a live coordinator match the library",
          "[transport][analyst][top_regions]") {
  CGP_SEEDED(9306);
  // Denser towards the north-east: the cells' counts differ.
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  const std::size_t n = 400;
  std::vector<double> points;
  for (std::size_t i = 0; i < n; ++i) {
    points.push_back(2000 * std::sqrt(unit(rng)));
    points.push_back(2000 * std::sqrt(unit(rng)));
  }
  const double budget = 0.1;
  LiveCoordinator live(points, n, budget, seed, "analyst-secret");
  auto analyst = *analyst::AnalystClient::connect(
      {live.address, "analyst-secret", "", 60s, std::nullopt, std::nullopt});
  const auto cells = *grid_regions(0, 0, 500, 4, 4);
  analyst::RemoteAccuracy schedule;
  schedule.max_rounds = 8;
  QueryOptions options;
  options.query_id = "race";

  auto local = *DeviceFleet::create(*DeviceConfig::cgp(budget), points, 2, seed, 1);
  BudgetMirror local_mirror(n, local.initial_budget());
  AccuracyFirstOptions local_options;
  local_options.method = Method::PM0;
  local_options.max_rounds = 8;
  local_options.query_id = "race";
  const auto expected =
      top_regions(local, local_mirror, cells, 2, test::charge_everyone(budget), local_options);
  REQUIRE(expected.has_value());

  auto remote = analyst.top_regions(
      cells, 2, analyst::RemoteCharges::fixed(coordinator::Charge{budget}), schedule, options);
  REQUIRE(remote.has_value());
  CHECK(remote->top_regions == expected->top);
  REQUIRE(remote->region_counts.size() == cells.size());
  for (std::size_t g = 0; g < cells.size(); ++g) {
    CHECK(remote->region_counts[g].lower == expected->counts[g].lower);
    CHECK(remote->region_counts[g].upper == expected->counts[g].upper);
  }
  REQUIRE(remote->certified.has_value());
  CHECK(*remote->certified == expected->certified);
  CHECK(remote->report.charged == expected->report.charged);
  CGP_REQUIRE_ERROR(
      analyst.top_regions(cells, 0, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}),
                          schedule, QueryOptions{}),
      ErrorCode::out_of_range, "k");
}
