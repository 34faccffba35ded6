// Devices of a live fleet spread over gateways dial their virtual shard's name
// (DeviceConnection::virtual_shards, docs/cluster.md): the name is the one TLS checks and SNI
// carries, connect_to dials another address under it, and settings a device cannot use are
// refused by name before anything is dialled.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "cgp/coordinator/queries.hpp"
#include "cgp/protocol/virtual_shard.hpp"
#include "cgp/simulation/ground_truth.hpp"
#include "cgp/transport/gateway.hpp"
#include "network_fixtures.hpp"
#include "simulation/fleet_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace cgp::simulation;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kShards = 4096;

link::DeviceConnection shard_device(std::uint16_t port, std::size_t i, const std::string& root) {
  link::DeviceConnection connection = test::shard_device_connection(port, i, kShards, root);
  connection.transport = link::DeviceTransport::frames;
  return connection;
}

}  // namespace

TEST_CASE("shard addressing: devices dial their shard's name on both transports",
          "[transport][cluster]") {
  const auto seed = test::test_seed(30);
  // The certificate names the shards only: a device that checked another name would fail.
  const test::ThrowawayCertificate tls("DNS:*.devices.test");
  const std::size_t n = 4;
  auto points = test::uniform_square(n, 1000, seed);
  const auto config = *DeviceConfig::cgp(1e4);
  auto options = test::tls_gateway_options(tls, n);
  options.frames_address = "127.0.0.1:0";
  auto gateway = *transport::DeviceGateway::start(options);
  std::vector<client::Device> devices;
  for (std::size_t i = 0; i < n; ++i) {
    devices.push_back(client::Device::open_for_simulation(config, seed, i));
    REQUIRE(devices.back().register_component("location", 2).ok());
    REQUIRE(devices.back().set_component("location", std::span(points).subspan(2 * i, 2)).ok());
  }
  std::vector<Status> outcomes(n);
  {
    std::vector<std::jthread> threads;
    for (std::size_t i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        auto connection =
            shard_device(static_cast<std::uint16_t>(gateway->frames_port()), i, tls.certificate);
        if (i % 2 == 1) {  // odd devices on gRPC, through the device port
          connection.transport = link::DeviceTransport::grpc;
          connection.coordinator_address =
              "s{shard}.devices.test:" + std::to_string(gateway->port());
          connection.connect_to = "127.0.0.1:" + std::to_string(gateway->port());
        }
        outcomes[i] = test::serve_simulated_device(connection, devices[i]);
      });
    REQUIRE(gateway->wait_for_devices(n, 20s));
    transport::NetworkFleet fleet(*gateway, test::device_ids(n), 2, 1e4, 10s);
    BudgetMirror mirror(n, fleet.initial_budget());
    QueryOptions query;
    query.method = Method::BM0;
    query.query_id = "shards";
    double lo[2] = {0, 0}, hi[2] = {500, 500};
    const geometry::Region range = *geometry::Box::create(lo, hi);
    auto result = range_count(fleet, mirror, range, test::charge_everyone(1e3), query);
    REQUIRE(result.has_value());
    CHECK(result->estimate == static_cast<double>(exact_count(points, 2, range)));
    CHECK(result->report.unanswered.empty());
    gateway.reset();
  }
  for (std::size_t i = 0; i < n; ++i) CHECK(outcomes[i].ok());
}

TEST_CASE("shard addressing: a certificate for another name is refused", "[transport][cluster]") {
  const test::ThrowawayCertificate tls("DNS:*.elsewhere.test,IP:127.0.0.1");
  auto options = test::tls_gateway_options(tls, 1);
  options.frames_address = "127.0.0.1:0";
  auto gateway = *transport::DeviceGateway::start(options);
  auto device = client::Device::open_for_simulation(*DeviceConfig::cgp(1e4), 30, 0);
  // Dialled at 127.0.0.1, which the certificate names, but checked as s<shard>.devices.test.
  const Status served = test::serve_simulated_device(
      shard_device(static_cast<std::uint16_t>(gateway->frames_port()), 0, tls.certificate), device);
  REQUIRE_FALSE(served.ok());
  CHECK(served.error().code == ErrorCode::unavailable);
  CHECK(gateway->connected() == 0);
}

TEST_CASE("shard addressing: settings a device cannot use are refused by name",
          "[transport][cluster]") {
  auto device = client::Device::open_for_simulation(*DeviceConfig::cgp(1e4), 30, 0);
  const auto refused = [&](link::DeviceConnection connection, const std::string& parameter) {
    connection.device_id = "device-0";
    connection.allow_simulation_randomness = true;
    const Status once = link::serve_device(connection, device);
    REQUIRE_FALSE(once.ok());
    CHECK(once.error().parameter == parameter);
    // Redialling cannot mend it: the reconnecting link returns at once.
    const Status again = link::serve_device_reconnecting(connection, device);
    REQUIRE_FALSE(again.ok());
    CHECK(again.error().parameter == parameter);
  };
  link::DeviceConnection bad_template;
  bad_template.coordinator_address = "s{shards}.devices.test:7000";
  bad_template.virtual_shards = kShards;
  refused(bad_template, "coordinator_address");
  link::DeviceConnection bad_count;
  bad_count.coordinator_address = "s{shard}.devices.test:7000";
  bad_count.virtual_shards = protocol::kMaxVirtualShards + 1;
  refused(bad_count, "virtual_shards");
  link::DeviceConnection bad_connect_to;
  bad_connect_to.coordinator_address = "127.0.0.1:7000";
  bad_connect_to.connect_to = "no-port";
  refused(bad_connect_to, "connect_to");
}
