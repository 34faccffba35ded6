// Check-in fleets: phones that connect only now and then, for a few seconds each,
// get the requests queued for them, answer, and leave; a device that never checks in within the
// round's window is reported (not_reached) and charged nothing, on the device and in the mirror.
// Over TLS with per-device credentials, as phones would connect.
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/credentials.hpp"
#include "cgp/transport/gateway.hpp"
#include "network_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace std::chrono_literals;

TEST_CASE("check-in: phones that connect for a few seconds at random times answer a query",
          "[transport][network][check-in]") {
  CGP_SEEDED(17006);
  std::mt19937_64 rng(seed);
  test::ThrowawayCertificate tls;
  const std::size_t phones = 12, never = 4, n = phones + never;
  auto gateway = *transport::DeviceGateway::start(test::tls_gateway_options(tls, n));
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());

  // Every third device inside the box [0, 1000]², the others 500 m or more outside: with
  // σ = 0.07 m (ρ = 100) the count is exact.
  const auto config = *DeviceConfig::cgp(1e4);
  std::vector<client::Device> devices;
  std::size_t inside_and_checking_in = 0;
  for (std::size_t i = 0; i < n; ++i) {
    devices.push_back(client::Device::open_for_simulation(config, seed, i));
    const bool inside = i % 3 == 0;
    if (inside && i < phones) ++inside_and_checking_in;
    const double offset = 40.0 * static_cast<double>(i);
    double here[2] = {inside ? 200.0 + offset : 1500.0 + offset, 500};
    REQUIRE(devices.back().register_component("location", 2, "m").ok());
    REQUIRE(devices.back().set_component("location", here).ok());
  }
  std::uniform_int_distribution<int> arrival_ms(400, 4000);
  std::vector<Status> served(phones);
  std::vector<std::chrono::milliseconds> arrivals(phones);
  for (auto& a : arrivals) a = std::chrono::milliseconds(arrival_ms(rng));

  transport::NetworkFleet fleet(*gateway, test::device_ids(n), 2, 1e4, 8s);  // the window
  fleet.set_check_in(true);
  BudgetMirror mirror(n, fleet.initial_budget());
  std::optional<Expected<CountResult>> count;
  {
    std::vector<std::jthread> threads;
    for (std::size_t i = 0; i < phones; ++i) {
      threads.emplace_back([&, i](std::stop_token stop) {
        // The phone wakes at a random moment of the window, checks in, answers, sleeps again.
        std::this_thread::sleep_for(arrivals[i]);
        link::DeviceConnection connection;
        connection.coordinator_address = address;
        connection.device_id = "device-" + std::to_string(i);
        connection.credential = "key-" + std::to_string(i);
        connection.tls_root_certificate = tls.certificate;
        connection.stop = stop;
        connection.check_in_idle = 1000ms;
        served[i] = test::serve_simulated_device(connection, devices[i]);
      });
    }
    double lo[2] = {0, 0}, hi[2] = {1000, 1000};
    QueryOptions query;
    query.method = Method::BM0;  // one round: a check-in fleet's natural query
    query.query_id = "check-in-count";
    count = range_count(fleet, mirror, *geometry::Box::create(lo, hi),
                        UserCharges::everyone(Charge{100}), query);
    for (auto& thread : threads) thread.join();  // each left on its own after answering
  }
  REQUIRE(count.has_value());
  REQUIRE(count->has_value());
  const auto& report = (*count)->report;
  std::vector<UserId> expected_missing;
  for (std::size_t i = phones; i < n; ++i) expected_missing.push_back(static_cast<UserId>(i));
  auto not_reached = report.not_reached;
  std::sort(not_reached.begin(), not_reached.end());
  CHECK(not_reached == expected_missing);
  CHECK(report.unanswered.size() == never);  // every phone that checked in answered
  CHECK(report.refused.empty());
  CHECK(report.rejected.empty());
  CHECK(std::lround((*count)->estimate) == static_cast<long>(inside_and_checking_in));
  // Charge{100}: each device is asked the largest ρ whose device charge fits 100.
  for (std::size_t i = 0; i < n; ++i) {
    INFO("device-" << i << " arrived after " << (i < phones ? arrivals[i].count() : -1) << " ms");
    if (i < phones) {
      CHECK(served[i].ok());
      CHECK(devices[i].spent() <= 100);
      CHECK(devices[i].spent() > 99);
      CHECK(report.charged[i].value() == Approx(devices[i].spent()).epsilon(1e-12));
      CHECK(mirror.remaining(static_cast<UserId>(i)) <= 1e4 - devices[i].spent() * (1 - 1e-12));
    } else {
      CHECK(devices[i].spent() == 0);  // never saw the request
      CHECK(report.charged[i].value() == 0);
      CHECK(mirror.remaining(static_cast<UserId>(i)) == 1e4);  // and the mirror charged nothing
    }
  }
  CHECK(gateway->counters().connects == phones);
  // Every phone got the request once, pushed at once or delivered at its check-in.
  CHECK(gateway->counters().requests == phones);
}

TEST_CASE("check-in: cgp-device --check-in processes answer an analyst's query over TLS",
          "[transport][network][check-in][device-program]") {
  CGP_SEEDED(17007);
  std::mt19937_64 rng(seed);
  test::ThrowawayCertificate tls;
  const auto dir =
      std::filesystem::temp_directory_path() / ("cgp-check-in-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::size_t phones = 4, n = phones + 1;  // the last device never checks in
  transport::CoordinatorOptions options;
  options.device_ids = test::device_ids(n);
  options.device_budget = 1.0;
  options.round_deadline = 8s;  // the window
  options.check_in = true;
  options.gateway.tls_certificate_chain = tls.certificate;
  options.gateway.tls_private_key = tls.key;
  options.analyst_credential_sha256 = transport::sha256_of("analyst-secret");
  for (const auto& id : options.device_ids) options.gateway.device_credentials[id] = "key-" + id;
  auto service = transport::CoordinatorService::start(options);
  REQUIRE(service.has_value());
  const std::string address = "127.0.0.1:" + std::to_string((*service)->port());
  const auto root = dir / "root.pem";
  std::ofstream(root) << tls.certificate;

  analyst::AnalystConnection connection;
  connection.coordinator_address = address;
  connection.credential = "analyst-secret";
  connection.tls_root_certificate = tls.certificate;
  connection.min_coverage = 0.5;
  connection.max_missing_share = 1;  // half the phones are not reached, by design
  auto analyst = analyst::AnalystClient::connect(connection);
  REQUIRE(analyst.has_value());
  std::optional<Expected<analyst::RemoteResult>> result;
  std::jthread query([&] {
    double lo[2] = {0, 0}, hi[2] = {1000, 1000};
    QueryOptions query_options;
    query_options.method = Method::BM0;
    query_options.query_id = "check-in-analyst";
    result = analyst->range_count(*geometry::Box::create(lo, hi),
                                  analyst::RemoteCharges::fixed(Charge{0.1}), query_options);
  });
  // Each phone's background task runs once, at a random moment of the window: two inside the
  // box, two outside.
  std::uniform_int_distribution<int> arrival_ms(500, 4000);
  std::vector<pid_t> pids;
  for (std::size_t i = 0; i < phones; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(arrival_ms(rng) / 4));
    const std::string id = options.device_ids[i];
    const auto credential = dir / (id + ".secret");
    std::ofstream(credential) << "key-" << id << "\n";
    pids.push_back(test::spawn_program(
        {CGP_DEVICE_PATH, "--coordinator", address, "--id", id, "--credential", credential.string(),
         "--tls-root", root.string(), "--ledger", (dir / (id + ".db")).string(), "--budget", "1",
         "--location", i % 2 == 0 ? "300,400" : "5000,400", "--check-in", "1000"}));
  }
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);  // each left on its own after answering
  }
  query.join();
  REQUIRE(result.has_value());
  REQUIRE(result->has_value());
  const auto& remote = **result;
  CHECK(std::lround(remote.estimate) == 2);  // σ = 2.2 m at ρ ≈ 0.1; margins of 300 m and more
  CHECK(remote.report.not_reached == std::vector<UserId>{static_cast<UserId>(phones)});
  CHECK(remote.report.unanswered == remote.report.not_reached);
  CHECK(remote.report.charged[phones].value() == 0);
  CHECK(remote.coverage.answered == phones);
  service->reset();
  std::filesystem::remove_all(dir);
}
