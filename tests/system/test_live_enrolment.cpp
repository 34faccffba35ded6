// A running coordinator follows its enrolment file both ways: devices enrolled while it runs
// connect and are asked from the next query, a changed credential replaces the old one at once,
// and a device enrolled again keeps its user index and its budget mirror (never reset upward),
// across a restart too. Until this, additions and new credentials waited for a restart.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/credentials.hpp"
#include "served_coordinator.hpp"
#include "state_reader.hpp"

using namespace cgp;
using namespace std::chrono_literals;

namespace {

// A box around every member's location (device i at (10 i, 10 i)).
geometry::Region everywhere() {
  double lo[2] = {-5, -5}, hi[2] = {1000, 1000};
  return *geometry::Box::create(lo, hi);
}

// One round at a fixed charge (BM1 asks it whole: a user whose mirror cannot pay is not asked).
Expected<analyst::RemoteResult> count(analyst::AnalystClient& analyst, const std::string& id,
                                      double charge, std::vector<coordinator::UserId> users = {}) {
  coordinator::QueryOptions query;
  query.method = coordinator::Method::BM1;
  query.query_id = id;
  return analyst.range_count(
      everywhere(), analyst::RemoteCharges::fixed(coordinator::Charge{charge}, std::move(users)),
      query);
}

std::size_t lines_with(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Waits (30 s at most) until the coordinator has followed `n` enrolments in all: devices refused
// a credential give up (a refusal does not get better), so they dial only once it has.
bool followed(const test::ServedCoordinator& c, std::size_t n) {
  return test::within(30s, [&] { return lines_with(c.log(), "event=enrolment-added") >= n; });
}

}  // namespace

TEST_CASE("enrolment: a device enrolled while the coordinator runs connects and is asked next",
          "[transport][enrol]") {
  test::ServedCoordinator c("cgp-enrol-live", 2);
  c.serve();
  auto swarm = *swarm::DeviceSwarm::start(c.swarm_options(), c.members());
  REQUIRE(c.connected(2));
  auto analyst = c.analyst();
  auto before = count(analyst, "before", 0.1);
  REQUIRE(before.has_value());
  CHECK(before->coverage.users == 2);

  // Enrolled while it runs: no SIGHUP, the coordinator's own poll of the file.
  REQUIRE(c.run({"enrol", "--devices", c.devices_file(), "--id", "late", "--credential-out",
                 c.path("late.key")}) == 0);
  REQUIRE(followed(c, 1));
  std::string key;
  std::getline(std::ifstream(c.path("late.key")), key);
  auto late = *swarm::DeviceSwarm::start(c.swarm_options(), {{"late", key, {30, 30}}});
  REQUIRE(c.connected(3));
  auto status = c.status();
  REQUIRE(status.has_value());
  CHECK(status->enrolled == 3);

  auto after = count(analyst, "after", 0.1);
  REQUIRE(after.has_value());
  CHECK(after->coverage.users == 3);  // the new device is a user of the next query
  CHECK(after->coverage.answered == 3);
  CHECK(after->estimate > 0);
  // It is user 2, the next index, as the file lists it (and a restart would number it).
  auto only_late = count(analyst, "only-late", 0.1, {2});
  REQUIRE(only_late.has_value());
  CHECK(only_late->coverage.users == 1);
  CHECK(only_late->coverage.answered == 1);

  late.reset();
  swarm.reset();
  c.signal(SIGTERM);
  CHECK(c.wait_exit(30s) == 0);
  const std::string log = c.log();
  INFO(log);
  CHECK(lines_with(log, "event=enrolment-added devices=1\n") == 1);
  CHECK(lines_with(log, "restart") == 0);
}

TEST_CASE("enrolment: a changed credential is refused at once and the new one admitted live",
          "[transport][enrol]") {
  test::ServedCoordinator c("cgp-enrol-credential", 2);
  c.serve();
  auto old_swarm = *swarm::DeviceSwarm::start(c.swarm_options(), c.members());
  REQUIRE(c.connected(2));

  // device-0 gets a new credential in one write of the file (an operator re-issuing a key),
  // followed at once on SIGHUP.
  const std::string new_secret = transport::new_credential();
  auto entries = transport::read_enrolment(c.devices_file());
  REQUIRE(entries.has_value());
  REQUIRE((*entries)[0].id == "device-0");
  (*entries)[0].credential = transport::sha256_of(new_secret);
  REQUIRE(transport::write_enrolment(c.devices_file(), *entries).ok());
  c.signal(SIGHUP);

  // The stream under the old credential ends, and a dial with it again is refused.
  REQUIRE(c.connected(1));
  CHECK(test::within(30s, [&] { return old_swarm->counters().refused_connections == 1; }));
  // The coordinator ends the stream inside enrol() and logs the change after it returns: the
  // line may follow the refusal the swarm sees.
  CHECK(test::within(30s, [&] {
    return c.log().find("event=credential-changed device=device-0") != std::string::npos;
  }));
  REQUIRE(old_swarm->reconnect(0));
  CHECK(test::within(30s, [&] { return old_swarm->counters().refused_connections == 2; }));
  CHECK(test::within(30s, [&] {
    return c.log().find("event=refused reason=credential device=device-0") != std::string::npos;
  }));
  // The new credential works without a restart, and device-0 is user 0 still.
  auto new_swarm =
      *swarm::DeviceSwarm::start(c.swarm_options(), {{"device-0", new_secret, {0, 0}}});
  REQUIRE(c.connected(2));
  auto analyst = c.analyst();
  auto counted = count(analyst, "after-change", 0.1);
  REQUIRE(counted.has_value());
  CHECK(counted->coverage.users == 2);
  CHECK(counted->coverage.answered == 2);
  auto only_0 = count(analyst, "only-0", 0.1, {0});
  REQUIRE(only_0.has_value());
  CHECK(only_0->coverage.answered == 1);
  CHECK(c.status()->connected == 2);  // the old credential is still refused

  old_swarm.reset();
  new_swarm.reset();
  c.signal(SIGTERM);
  CHECK(c.wait_exit(30s) == 0);
}

TEST_CASE("enrolment: a device enrolled again keeps its index and its mirror, across a restart",
          "[transport][enrol][state]") {
  test::ServedCoordinator c("cgp-enrol-mirror", 2);
  const std::string state = c.devices_file() + ".state";  // serve's default
  c.serve();
  auto members = c.members();
  auto swarm = *swarm::DeviceSwarm::start(c.swarm_options(), members);
  REQUIRE(c.connected(2));
  auto analyst = c.analyst();
  auto spend = count(analyst, "spend", 0.6, {0});
  REQUIRE(spend.has_value());
  REQUIRE(spend->coverage.answered == 1);
  const double spent_mirror = test::StateReader(state).mirror().at("device-0");
  CHECK(spent_mirror < 0.45);

  // Revoked, then enrolled again with a new credential (a fresh phone: its own ledger is full).
  REQUIRE(c.run({"revoke", "--devices", c.devices_file(), "--id", "device-0"}) == 0);
  REQUIRE(c.connected(1));
  REQUIRE(c.run({"enrol", "--devices", c.devices_file(), "--id", "device-0", "--credential-out",
                 c.path("device-0.key")}) == 0);
  c.signal(SIGHUP);  // followed at once
  REQUIRE(followed(c, 1));
  std::string key;
  std::getline(std::ifstream(c.path("device-0.key")), key);
  auto again = *swarm::DeviceSwarm::start(c.swarm_options(), {{"device-0", key, {0, 0}}});
  REQUIRE(c.connected(2));

  // Its mirror is what it was: 0.6 more is not asked of it; a charge that fits is, as user 0.
  auto too_much = count(analyst, "too-much", 0.6, {0});
  REQUIRE(too_much.has_value());
  CHECK(too_much->report.refused == std::vector<coordinator::UserId>{0});
  CHECK(too_much->coverage.answered == 0);
  CHECK(test::StateReader(state).mirror().at("device-0") <= spent_mirror);
  auto fits = count(analyst, "fits", 0.2, {0});
  REQUIRE(fits.has_value());
  CHECK(fits->coverage.answered == 1);
  const double after_fits = test::StateReader(state).mirror().at("device-0");
  CHECK(after_fits < spent_mirror - 0.15);

  // A device enrolled live and charged: its row is found by its id after the restart.
  REQUIRE(c.run({"enrol", "--devices", c.devices_file(), "--id", "late", "--credential-out",
                 c.path("late.key")}) == 0);
  REQUIRE(followed(c, 2));
  std::getline(std::ifstream(c.path("late.key")), key);
  auto late = *swarm::DeviceSwarm::start(c.swarm_options(), {{"late", key, {30, 30}}});
  REQUIRE(c.connected(3));
  auto spend_late = count(analyst, "spend-late", 0.6, {2});
  REQUIRE(spend_late.has_value());
  REQUIRE(spend_late->coverage.answered == 1);

  c.signal(SIGTERM);
  REQUIRE(c.wait_exit(30s) == 0);
  c.serve();
  REQUIRE(c.connected(3));  // the swarms redial
  auto restarted = c.analyst();
  // The same devices at the same indices, their mirrors as they were.
  auto user_0 = count(restarted, "restarted-0", 0.6, {0});
  REQUIRE(user_0.has_value());
  CHECK(user_0->report.refused == std::vector<coordinator::UserId>{0});
  auto user_2 = count(restarted, "restarted-2", 0.6, {2});
  REQUIRE(user_2.has_value());
  CHECK(user_2->report.refused == std::vector<coordinator::UserId>{2});
  auto user_1 = count(restarted, "restarted-1", 0.6, {1});
  REQUIRE(user_1.has_value());
  CHECK(user_1->coverage.answered == 1);  // device-1 was never charged 0.6
  CHECK(test::StateReader(state).mirror().at("device-0") <= after_fits);

  late.reset();
  again.reset();
  swarm.reset();
  c.signal(SIGTERM);
  CHECK(c.wait_exit(30s) == 0);
}

TEST_CASE("enrolment: the library's enrol names a bad id and says what it did",
          "[transport][enrol]") {
  transport::CoordinatorOptions options;
  options.device_ids = {"d0", "d1"};
  options.revoked_device_ids = {"d1"};
  options.gateway.device_credential_digests["d0"] = transport::sha256_of("k0");
  auto service = *transport::CoordinatorService::start(options);
  for (const std::string& bad : {std::string(), std::string("d\xff"), std::string(200, 'x')}) {
    auto refused = service->enrol(bad, transport::sha256_of("k"));
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().parameter == "device_id");
  }
  auto readmitted = service->enrol("d1", transport::sha256_of("k1"));
  REQUIRE(readmitted.has_value());
  CHECK(readmitted->user == 1);
  CHECK(readmitted->readmitted);
  CHECK_FALSE(readmitted->new_user);
  auto added = service->enrol("d2", transport::sha256_of("k2"));
  REQUIRE(added.has_value());
  CHECK(added->user == 2);
  CHECK(added->new_user);
  auto same = service->enrol("d2", transport::sha256_of("k2"));
  REQUIRE(same.has_value());
  CHECK((!same->new_user && !same->readmitted && !same->credential_changed));
  auto changed = service->enrol("d0", transport::sha256_of("k0-new"));
  REQUIRE(changed.has_value());
  CHECK(changed->user == 0);
  CHECK(changed->credential_changed);
  auto analyst = *analyst::AnalystClient::connect(
      {"127.0.0.1:" + std::to_string(service->port()), "", "", 30s, std::nullopt, std::nullopt});
  auto status = analyst.status();
  REQUIRE(status.has_value());
  CHECK(status->enrolled == 3);
  // Revoked again, it leaves the count at once.
  CHECK(*service->revoke("d1"));
  CHECK(analyst.status()->enrolled == 2);
}
