// Location frames over the network (issue 17): a coordinator with a frame announces it in
// Welcome and stamps it on requests; devices that know only their GPS lon/lat project it on the
// device and are counted where they are; a device with lon/lat cannot serve a coordinator that
// announces no frame (named error, not a wrong answer).
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "cgp/coordinator/queries.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/transport/gateway.hpp"
#include "network_fixtures.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace std::chrono_literals;

TEST_CASE("network: devices given lon/lat are counted in the coordinator's frame",
          "[transport][network][frame]") {
  const auto frame =
      *geometry::LocationFrame::create(geometry::ProjectionKind::local_equidistant, -73.97, 40.75);
  // Three phones within ~600 m of the frame's origin, three 5-10 km away.
  const std::vector<std::array<double, 2>> phones{{-73.968, 40.751}, {-73.975, 40.747},
                                                  {-73.965, 40.754}, {-73.90, 40.75},
                                                  {-74.05, 40.70},   {-73.97, 40.66}};
  transport::GatewayOptions options;
  options.frame = frame;
  auto gateway = *transport::DeviceGateway::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  const auto config = *DeviceConfig::cgp(1e4);
  std::vector<client::Device> devices;
  for (std::size_t k = 0; k < phones.size(); ++k)
    devices.push_back(client::Device::open_for_simulation(config, 77, k));
  std::vector<Status> served(phones.size());
  {
    std::vector<std::jthread> threads;
    for (std::size_t k = 0; k < phones.size(); ++k) {
      threads.emplace_back([&, k](std::stop_token stop) {
        link::DeviceConnection connection;
        connection.coordinator_address = address;
        connection.device_id = "device-" + std::to_string(k);
        connection.stop = stop;
        connection.lonlat = phones[k];
        served[k] = test::serve_simulated_device(connection, devices[k]);
      });
    }
    REQUIRE(gateway->wait_for_devices(phones.size(), 20s));
    transport::NetworkFleet fleet(*gateway, test::device_ids(phones.size()), 2, 1e4, 10s);
    BudgetMirror mirror(phones.size(), fleet.initial_budget());
    double lo[2] = {-1000, -1000}, hi[2] = {1000, 1000};
    QueryOptions query;
    query.method = Method::BM0;  // point releases: σ = 0.07 m at ρ = 100, margins over 400 m
    query.query_id = "frame-count";
    auto count = range_count(fleet, mirror, *geometry::Box::create(lo, hi),
                             UserCharges::everyone(Charge{100}), query);
    REQUIRE(count.has_value());
    CHECK(count->report.unanswered.empty());
    CHECK(count->report.rejected.empty());
    CHECK(std::lround(count->estimate) == 3);
    for (const auto& device : devices) REQUIRE(device.location_frame() == frame);
    for (auto& thread : threads) thread.request_stop();
    gateway.reset();
  }
  for (const auto& status : served) CHECK(status.ok());
}

TEST_CASE("network: a device with lon/lat refuses a coordinator that announces no frame",
          "[transport][network][frame]") {
  auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
  auto device = client::Device::open_for_simulation(*DeviceConfig::cgp(1.0), 5, 0);
  link::DeviceConnection connection;
  connection.coordinator_address = "127.0.0.1:" + std::to_string(gateway->port());
  connection.device_id = "device-0";
  connection.lonlat = std::array<double, 2>{-73.97, 40.75};
  const Status served = test::serve_simulated_device(connection, device);
  REQUIRE_FALSE(served.ok());
  CHECK(served.error().parameter == "frame");
  CHECK(device.spent() == 0);
}
