// The device link's C ABI (cgp/cgp_link.h): a cgp_device served to a real
// gateway by cgp_connection_run_once (check-in, blocking) and cgp_connection_start (own thread,
// redialling), a C program's check-in over TLS, the app calling its device while the link
// serves, and every bad argument named with nothing charged.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cgp/cgp_link.h"
#include "cgp/coordinator/queries.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/transport/gateway.hpp"
#include "network_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace std::chrono_literals;

namespace {

struct DeviceHandle {
  cgp_device* device = nullptr;
  explicit DeviceHandle(double budget) {
    REQUIRE(cgp_device_open_cgp(nullptr, budget, 0, &device) == CGP_OK);
  }
  ~DeviceHandle() { cgp_device_close(device); }
  double remaining() const {
    double out = -1;
    REQUIRE(cgp_device_remaining(device, &out) == CGP_OK);
    return out;
  }
  void place(double x, double y) const {
    const double here[2] = {x, y};
    REQUIRE(cgp_device_set_component(device, "location", here, 2) == CGP_OK);
  }
};

struct Link {
  cgp_connection* connection = nullptr;
  Link(const DeviceHandle& device, const std::string& address, const std::string& id) {
    REQUIRE(cgp_device_connect(device.device, address.c_str(), id.c_str(), &connection) == CGP_OK);
  }
  ~Link() { cgp_connection_free(connection); }
  void credential(const std::string& key) const {
    REQUIRE(cgp_connection_set_credential(connection, reinterpret_cast<const uint8_t*>(key.data()),
                                          key.size()) == CGP_OK);
  }
};

Expected<CountResult> count_box(transport::NetworkFleet& fleet, BudgetMirror& mirror,
                                const std::string& query_id) {
  double lo[2] = {0, 0}, hi[2] = {1000, 1000};
  QueryOptions query;
  query.method = Method::BM0;
  query.query_id = query_id;
  return range_count(fleet, mirror, *geometry::Box::create(lo, hi),
                     UserCharges::everyone(Charge{100}), query);
}

}  // namespace

TEST_CASE("device link (C): phones checking in with cgp_connection_run_once answer over TLS",
          "[transport][network][link][check-in]") {
  test::ThrowawayCertificate tls;
  const std::size_t phones = 3, n = phones + 1;  // the last one never checks in
  auto gateway = *transport::DeviceGateway::start(test::tls_gateway_options(tls, n));
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());

  std::vector<std::unique_ptr<DeviceHandle>> devices;
  std::vector<std::unique_ptr<Link>> links;
  for (std::size_t i = 0; i < n; ++i) {
    devices.push_back(std::make_unique<DeviceHandle>(1e4));
    devices.back()->place(i == 1 ? 3000 : 200 + 100.0 * static_cast<double>(i), 500);
    links.push_back(
        std::make_unique<Link>(*devices.back(), address, "device-" + std::to_string(i)));
    links.back()->credential("key-" + std::to_string(i));
    REQUIRE(cgp_connection_set_tls_root(links.back()->connection, tls.certificate.c_str()) ==
            CGP_OK);
    REQUIRE(cgp_connection_set_check_in(links.back()->connection, 1000) == CGP_OK);
  }
  transport::NetworkFleet fleet(*gateway, test::device_ids(n), 2, 1e4, 8s);  // the window
  fleet.set_check_in(true);
  BudgetMirror mirror(n, fleet.initial_budget());
  std::vector<int> ran(phones, -1);
  std::optional<Expected<CountResult>> count;
  {
    std::vector<std::jthread> tasks;
    for (std::size_t i = 0; i < phones; ++i)
      tasks.emplace_back([&, i] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300 + 500 * i));
        ran[i] = cgp_connection_run_once(links[i]->connection);  // blocks, then leaves
      });
    count = count_box(fleet, mirror, "c-link-check-in");
  }
  for (std::size_t i = 0; i < phones; ++i) {
    INFO("device-" << i << ": " << cgp_status_name(ran[i]));
    CHECK(ran[i] == CGP_OK);
    CHECK(cgp_connection_running(links[i]->connection) == 0);
    CHECK(devices[i]->remaining() < 1e4 - 99);
  }
  CHECK(devices[phones]->remaining() == 1e4);  // never checked in: charged nothing
  REQUIRE(count.has_value());
  REQUIRE(count->has_value());
  CHECK(std::lround((*count)->estimate) == 2);  // σ = 0.07 m: devices 0 and 2 inside
  CHECK((*count)->report.not_reached == std::vector<UserId>{static_cast<UserId>(phones)});
}

TEST_CASE(
    "device link (C): a started link serves on its own thread while the app sets its "
    "location, and stops",
    "[transport][network][link]") {
  CGP_SEEDED(17402);
  auto gateway = *transport::DeviceGateway::start(transport::GatewayOptions{});
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  DeviceHandle device(1e4);
  device.place(500, 500);
  Link link(device, address, "device-0");
  REQUIRE(cgp_connection_start(link.connection) == CGP_OK);
  CHECK(cgp_connection_running(link.connection) == 1);
  // One run at a time, and no settings under a running link.
  CHECK(cgp_connection_run_once(link.connection) == CGP_INVALID_ARGUMENT);
  CHECK(std::string(cgp_connection_last_error(link.connection)).find("in progress") !=
        std::string::npos);
  CHECK(cgp_connection_start(link.connection) == CGP_INVALID_ARGUMENT);
  CHECK(cgp_connection_set_check_in(link.connection, 10) == CGP_INVALID_ARGUMENT);
  REQUIRE(gateway->wait_for_devices(1, 20s));

  // The app moves the device from its own thread while queries run: every call goes through the
  // device's lock, and every query sees one position or the other, never a torn one.
  std::atomic<bool> querying{true};
  std::jthread app([&] {
    std::mt19937_64 rng(seed);
    while (querying) {
      const double here[2] = {rng() % 2 ? 500.0 : 5000.0, 500.0};
      REQUIRE(cgp_device_set_component(device.device, "location", here, 2) == CGP_OK);
      double remaining = 0;
      REQUIRE(cgp_device_remaining(device.device, &remaining) == CGP_OK);
      std::this_thread::sleep_for(1ms);
    }
  });
  transport::NetworkFleet fleet(*gateway, test::device_ids(1), 2, 1e4, 10s);
  BudgetMirror mirror(1, fleet.initial_budget());
  for (int q = 0; q < 5; ++q) {
    auto count = count_box(fleet, mirror, "c-link-started-" + std::to_string(q));
    REQUIRE(count.has_value());
    CHECK(count->report.unanswered.empty());
    const long estimate = std::lround(count->estimate);
    CHECK((estimate == 0 || estimate == 1));
  }
  querying = false;
  app.join();
  CHECK(device.remaining() < 1e4 - 5 * 99);
  CHECK(cgp_connection_stop(link.connection) == CGP_OK);
  CHECK(cgp_connection_running(link.connection) == 0);
  CHECK(test::eventually([&] { return gateway->connected() == 0; }));
  CHECK(cgp_connection_stop(link.connection) == CGP_OK);  // nothing runs: a no-op
}

TEST_CASE("device link (C): a started link redials a coordinator that comes back",
          "[transport][network][link]") {
  // A port that is free now: the coordinator starts there only after the link has failed to
  // reach it a few times.
  std::string address;
  {
    auto probe = *transport::DeviceGateway::start(transport::GatewayOptions{});
    address = "127.0.0.1:" + std::to_string(probe->port());
  }
  DeviceHandle device(1e4);
  device.place(500, 500);
  Link link(device, address, "device-0");
  REQUIRE(cgp_connection_start(link.connection) == CGP_OK);
  std::this_thread::sleep_for(700ms);  // sessions failing fast, backoff growing
  CHECK(cgp_connection_running(link.connection) == 1);
  transport::GatewayOptions options;
  options.address = address;
  auto gateway = transport::DeviceGateway::start(options);
  REQUIRE(gateway.has_value());
  REQUIRE((*gateway)->wait_for_devices(1, 20s));  // backoff is at most 5 s
  transport::NetworkFleet fleet(**gateway, test::device_ids(1), 2, 1e4, 10s);
  BudgetMirror mirror(1, fleet.initial_budget());
  auto count = count_box(fleet, mirror, "c-link-redial");
  REQUIRE(count.has_value());
  CHECK(std::lround(count->estimate) == 1);
  CHECK(cgp_connection_stop(link.connection) == CGP_OK);
}

TEST_CASE("device link (C): a refused credential ends a started link, named, charging nothing",
          "[transport][network][link]") {
  test::ThrowawayCertificate tls;
  auto options = test::tls_gateway_options(tls, 0);
  options.device_credentials["device-0"] = "right";
  auto gateway = *transport::DeviceGateway::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  DeviceHandle device(1e4);
  device.place(500, 500);
  Link link(device, address, "device-0");
  link.credential("wrong");
  // A credential never crosses the network in plaintext: refused by name before dialling.
  CHECK(cgp_connection_run_once(link.connection) == CGP_INVALID_ARGUMENT);
  CHECK(std::string(cgp_connection_last_error(link.connection)).find("tls_root") !=
        std::string::npos);
  CHECK(cgp_connection_start(link.connection) == CGP_INVALID_ARGUMENT);
  CHECK(gateway->counters().connects == 0);
  REQUIRE(cgp_connection_set_tls_root(link.connection, tls.certificate.c_str()) == CGP_OK);
  REQUIRE(cgp_connection_start(link.connection) == CGP_OK);
  // No redial mends a refused credential: the link's thread ends by itself.
  CHECK(test::eventually([&] { return cgp_connection_running(link.connection) == 0; }));
  CHECK(cgp_connection_stop(link.connection) == CGP_UNAUTHENTICATED);
  CHECK(std::string(cgp_connection_last_error(link.connection)).find("credential") !=
        std::string::npos);
  CHECK(cgp_connection_stop(link.connection) == CGP_OK);  // reported once
  CHECK(cgp_connection_last_session(link.connection) == CGP_UNAUTHENTICATED);
  CHECK(device.remaining() == 1e4);
  // The same through run_once.
  CHECK(cgp_connection_run_once(link.connection) == CGP_UNAUTHENTICATED);
}

TEST_CASE("device link (C): a device given lon/lat answers in the frame the coordinator announces",
          "[transport][network][link][frame]") {
  transport::GatewayOptions options;
  options.frame =
      *geometry::LocationFrame::create(geometry::ProjectionKind::local_equidistant, -73.97, 40.75);
  auto gateway = *transport::DeviceGateway::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  DeviceHandle device(1e4);
  Link link(device, address, "device-0");
  // Before any Welcome the fix is kept for the link (the device has no frame yet).
  REQUIRE(cgp_connection_set_lonlat(link.connection, -73.968, 40.751) == CGP_OK);
  REQUIRE(cgp_connection_start(link.connection) == CGP_OK);
  REQUIRE(gateway->wait_for_devices(1, 20s));
  transport::NetworkFleet fleet(*gateway, test::device_ids(1), 2, 1e4, 10s);
  BudgetMirror mirror(1, fleet.initial_budget());
  double lo[2] = {-1000, -1000}, hi[2] = {1000, 1000};
  QueryOptions query;
  query.method = Method::BM0;
  query.query_id = "c-link-frame-inside";
  auto inside = range_count(fleet, mirror, *geometry::Box::create(lo, hi),
                            UserCharges::everyone(Charge{100}), query);
  REQUIRE(inside.has_value());
  CHECK(std::lround(inside->estimate) == 1);
  // A new fix 8 km away, while the link serves: projected at once.
  REQUIRE(cgp_connection_set_lonlat(link.connection, -73.90, 40.75) == CGP_OK);
  query.query_id = "c-link-frame-outside";
  auto outside = range_count(fleet, mirror, *geometry::Box::create(lo, hi),
                             UserCharges::everyone(Charge{100}), query);
  REQUIRE(outside.has_value());
  CHECK(std::lround(outside->estimate) == 0);
  // A fix ~1,800 km away is placed too (clamped at the service area's edge, never refused:
  // a refusal would depend on where the user is), and the next release is from it — here
  // also clamped by the release's box, ±524 km for a device of budget 1e4 (privatizer.md).
  REQUIRE(cgp_connection_set_lonlat(link.connection, -95.0, 40.75) == CGP_OK);
  double wide_lo[2] = {-6e5, -6e5}, wide_hi[2] = {-4e5, 6e5};
  query.query_id = "c-link-frame-far";
  auto far = range_count(fleet, mirror, *geometry::Box::create(wide_lo, wide_hi),
                         UserCharges::everyone(Charge{100}), query);
  REQUIRE(far.has_value());
  CHECK(std::lround(far->estimate) == 1);
  CHECK(cgp_connection_stop(link.connection) == CGP_OK);
}

TEST_CASE("device link (C): bad arguments are named, and nothing is dialled or charged",
          "[transport][link][bad-input]") {
  DeviceHandle device(1.0);
  cgp_connection* connection = reinterpret_cast<cgp_connection*>(&device);  // must be reset
  CHECK(cgp_device_connect(nullptr, "127.0.0.1:1", "d", &connection) == CGP_INVALID_ARGUMENT);
  CHECK(connection == nullptr);
  CHECK(std::string(cgp_connection_last_error(nullptr)).find("device") != std::string::npos);
  CHECK(cgp_device_connect(device.device, nullptr, "d", &connection) == CGP_INVALID_ARGUMENT);
  CHECK(cgp_device_connect(device.device, "", "d", &connection) == CGP_INVALID_ARGUMENT);
  CHECK(std::string(cgp_connection_last_error(nullptr)).find("address") != std::string::npos);
  CHECK(cgp_device_connect(device.device, "host name:1", "d", &connection) == CGP_INVALID_ARGUMENT);
  CHECK(cgp_device_connect(device.device, "127.0.0.1:1", "", &connection) == CGP_INVALID_ARGUMENT);
  CHECK(cgp_device_connect(device.device, "127.0.0.1:1", "phone 7", &connection) ==
        CGP_INVALID_ARGUMENT);  // the coordinator would refuse the Hello: refused here
  CHECK(std::string(cgp_connection_last_error(nullptr)).find("device_id may hold only") !=
        std::string::npos);
  CHECK(std::string(cgp_connection_last_error(nullptr)).find("device_id") != std::string::npos);
  const std::string long_id(129, 'x');
  CHECK(cgp_device_connect(device.device, "127.0.0.1:1", long_id.c_str(), &connection) ==
        CGP_INVALID_ARGUMENT);
  CHECK(cgp_device_connect(device.device, "127.0.0.1:1", "d", nullptr) == CGP_INVALID_ARGUMENT);

  Link link(device, "127.0.0.1:1", "device-0");  // nothing listens on port 1
  cgp_connection* c = link.connection;
  CHECK(cgp_connection_set_credential(c, nullptr, 3) == CGP_INVALID_ARGUMENT);
  const std::string huge(4097, 'k');
  CHECK(cgp_connection_set_credential(c, reinterpret_cast<const uint8_t*>(huge.data()),
                                      huge.size()) == CGP_TOO_LARGE);
  CHECK(std::string(cgp_connection_last_error(c)).find("credential") != std::string::npos);
  CHECK(cgp_connection_set_tls_root(c, "not a certificate") == CGP_INVALID_ARGUMENT);
  CHECK(std::string(cgp_connection_last_error(c)).find("tls_root") != std::string::npos);
  CHECK(cgp_connection_set_tls_root(c, nullptr) == CGP_OK);  // plaintext again
  CHECK(cgp_connection_set_check_in(c, 3600u * 1000u + 1) == CGP_OUT_OF_RANGE);
  CHECK(std::string(cgp_connection_last_error(c)).find("idle_ms") != std::string::npos);
  CHECK(cgp_connection_set_lonlat(c, std::nan(""), 40) == CGP_NOT_FINITE);
  CHECK(cgp_connection_set_lonlat(c, 10, 90) == CGP_OUT_OF_RANGE);
  CHECK(std::string(cgp_connection_last_error(c)).find("lat") != std::string::npos);
  CHECK(cgp_connection_set_lonlat(c, 181, 0) == CGP_OUT_OF_RANGE);
  CHECK(cgp_connection_set_watch_limits(c, 0, 10) == CGP_OUT_OF_RANGE);
  CHECK(cgp_connection_set_watch_limits(c, INFINITY, 10) == CGP_NOT_FINITE);
  CHECK(cgp_connection_set_watch_limits(c, 1, 0) == CGP_OUT_OF_RANGE);
  CHECK(std::string(cgp_connection_last_error(c)).find("max_watches") != std::string::npos);
  // Another thread's errors never overwrite this thread's message.
  std::thread([&] {
    CHECK(cgp_connection_set_check_in(c, 4000000000u) == CGP_OUT_OF_RANGE);
  }).join();
  CHECK(std::string(cgp_connection_last_error(c)).find("max_watches") != std::string::npos);
  CHECK(cgp_connection_set_virtual_shards(c, (1u << 20) + 1) == CGP_OUT_OF_RANGE);
  CHECK(std::string(cgp_connection_last_error(c)).find("shard_count") != std::string::npos);
  CHECK(cgp_connection_set_connect_to(c, "no-port") == CGP_INVALID_ARGUMENT);
  CHECK(std::string(cgp_connection_last_error(c)).find("connect_to") != std::string::npos);
  CHECK(cgp_connection_set_connect_to(c, "a b:1") == CGP_INVALID_ARGUMENT);
  CHECK(cgp_connection_set_connect_to(c, "127.0.0.1:1") == CGP_OK);
  CHECK(cgp_connection_set_connect_to(c, nullptr) == CGP_OK);
  CHECK(cgp_connection_set_virtual_shards(c, 4096) == CGP_OK);
  CHECK(cgp_connection_set_virtual_shards(c, 0) == CGP_OK);
  CHECK(cgp_connection_run_once(nullptr) == CGP_INVALID_ARGUMENT);
  CHECK(cgp_connection_start(nullptr) == CGP_INVALID_ARGUMENT);
  CHECK(cgp_connection_stop(nullptr) == CGP_INVALID_ARGUMENT);
  CHECK(cgp_connection_running(nullptr) == 0);
  cgp_connection_free(nullptr);
  // Nobody listens: unavailable, named, nothing charged.
  CHECK(cgp_connection_last_session(c) == CGP_OK);  // no session yet
  CHECK(cgp_connection_run_once(c) == CGP_UNAVAILABLE);
  CHECK(std::string(cgp_connection_last_error(c)).find("coordinator") != std::string::npos);
  CHECK(cgp_connection_last_session(c) == CGP_UNAVAILABLE);
  CHECK(device.remaining() == 1.0);
}

TEST_CASE("device link (C): start and stop racing from two threads never hang or abort",
          "[transport][link]") {
  DeviceHandle device(1.0);
  Link link(device, "127.0.0.1:1", "device-0");  // nothing listens: sessions fail fast
  std::atomic<bool> racing{true};
  std::atomic<long> starts{0}, stops{0}, failed_stops{0};
  std::jthread starter([&] {
    while (racing) starts += cgp_connection_start(link.connection) == CGP_OK;
  });
  std::jthread stopper([&] {
    while (racing) {
      failed_stops += cgp_connection_stop(link.connection) != CGP_OK;
      ++stops;
    }
  });
  std::this_thread::sleep_for(1500ms);
  racing = false;
  starter.join();
  stopper.join();
  INFO(starts << " starts, " << stops << " stops");
  CHECK(starts > 0);
  CHECK(stops > 0);
  CHECK(failed_stops == 0);
  // A started link that cannot reach its coordinator says why, and keeps trying.
  if (!cgp_connection_running(link.connection))
    REQUIRE(cgp_connection_start(link.connection) == CGP_OK);
  CHECK(test::eventually(
      [&] { return cgp_connection_last_session(link.connection) == CGP_UNAVAILABLE; }));
  CHECK(cgp_connection_running(link.connection) == 1);
  CHECK(cgp_connection_stop(link.connection) == CGP_OK);
  CHECK(cgp_connection_running(link.connection) == 0);
  CHECK(device.remaining() == 1.0);
}

#ifdef CGP_CHECK_IN_DEVICE_PATH
TEST_CASE("device link (C): a C program checks in over TLS and answers a query",
          "[transport][network][link][check-in][exec]") {
  test::ThrowawayCertificate tls;
  const auto dir =
      std::filesystem::temp_directory_path() / ("cgp-c-link-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto options = test::tls_gateway_options(tls, 0);
  options.device_credentials["phone-0"] = "secret-0";
  options.frame =
      *geometry::LocationFrame::create(geometry::ProjectionKind::local_equidistant, -73.97, 40.75);
  auto gateway = *transport::DeviceGateway::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  std::ofstream(dir / "root.pem") << tls.certificate;
  std::ofstream(dir / "credential") << "secret-0\n";

  transport::NetworkFleet fleet(*gateway, {"phone-0"}, 2, 1.0, 8s);
  fleet.set_check_in(true);
  BudgetMirror mirror(1, fleet.initial_budget());
  std::optional<Expected<CountResult>> count;
  std::jthread query([&] {
    double lo[2] = {-1000, -1000}, hi[2] = {1000, 1000};
    QueryOptions query_options;
    query_options.method = Method::BM0;
    query_options.query_id = "c-program-check-in";
    count = range_count(fleet, mirror, *geometry::Box::create(lo, hi),
                        UserCharges::everyone(Charge{0.1}), query_options);
  });
  std::this_thread::sleep_for(300ms);
  const pid_t pid = test::spawn_program({CGP_CHECK_IN_DEVICE_PATH, address, "phone-0",
                                         (dir / "credential").string(), (dir / "root.pem").string(),
                                         (dir / "ledger.db").string(), "-73.968", "40.751"});
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // checked in, answered, left on its own
  query.join();
  REQUIRE(count.has_value());
  REQUIRE(count->has_value());
  CHECK((*count)->report.unanswered.empty());
  CHECK(std::lround((*count)->estimate) == 1);  // σ ≈ 2.2 m at ρ ≈ 0.1; 200 m inside
  std::filesystem::remove_all(dir);
}
#endif

TEST_CASE("device link: a stop while the device answers sends the reply before it closes",
          "[transport][network][link]") {
  auto gateway = *transport::DeviceGateway::start(transport::GatewayOptions{});
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  auto device = client::Device::open_for_simulation(*DeviceConfig::cgp(1e4), 5, 0);
  double here[2] = {500, 500};
  REQUIRE(device.register_component("location", 2, "m").ok());
  REQUIRE(device.set_component("location", here).ok());
  Status served;
  std::mutex device_mutex;  // the test reads the device while the link serves it
  std::jthread serving([&](std::stop_token stop) {
    link::DeviceConnection connection;
    connection.device_mutex = &device_mutex;
    connection.coordinator_address = address;
    connection.device_id = "device-0";
    connection.stop = stop;
    connection.reply_delay = 800ms;  // a slow device: charged, its reply not yet out
    served = test::serve_simulated_device(connection, device);
  });
  REQUIRE(gateway->wait_for_devices(1, 20s));
  transport::NetworkFleet fleet(*gateway, test::device_ids(1), 2, 1e4, 20s);
  BudgetMirror mirror(1, fleet.initial_budget());
  std::optional<Expected<CountResult>> count;
  std::jthread query([&] { count = count_box(fleet, mirror, "stop-while-answering"); });
  // The device has charged; the stop comes while its reply waits.
  REQUIRE(test::eventually([&] {
    std::lock_guard lock(device_mutex);
    return device.spent() > 0;
  }));
  serving.request_stop();
  query.join();
  serving.join();
  CHECK(served.ok());
  REQUIRE(count.has_value());
  REQUIRE(count->has_value());
  CHECK((*count)->report.unanswered.empty());  // the charge came with its reply
  CHECK(std::lround((*count)->estimate) == 1);
  CHECK((*count)->report.charged[0].value() == Approx(device.spent()).epsilon(1e-12));
}
