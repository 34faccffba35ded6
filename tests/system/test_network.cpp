// Devices over gRPC on loopback: the same seeded query gives the same result over the network as
// in-process, and a device that is not there is reported, not waited for.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <stop_token>
#include <thread>

#include "cgp/coordinator/queries.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/simulation/device_fleet.hpp"
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

// n simulated devices (built as DeviceFleet builds them), the first `serve` serving over gRPC.
struct RemoteDevices : test::ThreadedDevices {
  RemoteDevices(const DeviceConfig& config, const std::vector<double>& points, std::uint64_t seed,
                const std::string& address, std::size_t serve)
      : ThreadedDevices(config, points, seed, address, 0, points.size() / 2, serve) {}
};

using test::device_ids;

}  // namespace

TEST_CASE("network: the same seeded query gives the same result as in-process",
          "[transport][network]") {
  CGP_SEEDED(9101);
  const std::size_t n = 40;
  auto points = test::uniform_square(n, 2000, seed);
  const auto config = *DeviceConfig::cgp(1.0);
  double lo[2] = {500, 500}, hi[2] = {1500, 1500};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  auto rho = test::charge_everyone(1e-3);
  QueryOptions options;
  options.method = Method::PM1;
  options.rounds = 4;
  options.query_id = "network-parity";

  auto local = *DeviceFleet::create(config, points, 2, seed, 1);
  BudgetMirror local_mirror(n, local.initial_budget());
  auto expected = *range_count(local, local_mirror, range, rho, options);

  auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  {
    RemoteDevices remote(config, points, seed, address, n);
    REQUIRE(gateway->wait_for_devices(n, 20s));
    transport::NetworkFleet fleet(*gateway, device_ids(n), 2, 1.0, 10s);
    BudgetMirror mirror(n, fleet.initial_budget());
    auto result = range_count(fleet, mirror, range, rho, options);
    REQUIRE(result.has_value());
    CHECK(result->estimate == expected.estimate);
    CHECK(result->report.charged == expected.report.charged);
    CHECK(result->report.unanswered.empty());
    gateway.reset();  // closes every stream; the device threads return
  }
}

TEST_CASE("network: devices that are not connected are reported as unanswered",
          "[transport][network]") {
  CGP_SEEDED(9102);
  const std::size_t n = 12, online = 8;
  auto points = test::uniform_square(n, 1000, seed);
  const auto config = *DeviceConfig::cgp(1.0);
  std::mutex log_mutex;
  std::vector<std::string> log;
  transport::GatewayOptions gateway_options;
  gateway_options.log = [&](const std::string& line) {
    std::lock_guard lock(log_mutex);
    log.push_back(line);
  };
  auto gateway = *transport::DeviceGateway::start(gateway_options);
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  {
    RemoteDevices remote(config, points, seed, address, online);
    REQUIRE(gateway->wait_for_devices(online, 20s));
    transport::NetworkFleet fleet(*gateway, device_ids(n), 2, 1.0, 2s);
    BudgetMirror mirror(n, fleet.initial_budget());
    auto rho = test::charge_everyone(1e-3);
    QueryOptions options;
    options.method = Method::BM1;
    options.query_id = "partial";
    double lo[2] = {0, 0}, hi[2] = {500, 500};
    auto result = range_count(fleet, mirror, *geometry::Box::create(lo, hi), rho, options);
    REQUIRE(result.has_value());
    CHECK(result->report.unanswered.size() == n - online);
    for (UserId u : result->report.unanswered) CHECK(u >= online);
    for (UserId u = 0; u < online; ++u) CHECK(remote.devices[u].spent() > 0);
    // Counters and one structured line per event.
    const auto counters = gateway->counters();
    CHECK(counters.connects == online);
    CHECK(counters.rounds == 1);
    CHECK(counters.requests == online);
    CHECK(counters.replies == online);
    CHECK(counters.unanswered == n - online);
    {
      std::lock_guard lock(log_mutex);
      CHECK(std::count_if(log.begin(), log.end(), [](const std::string& l) {
              return l.rfind("event=connect device=device-", 0) == 0;
            }) == static_cast<long>(online));
      CHECK(std::count_if(log.begin(), log.end(), [](const std::string& l) {
              return l.rfind(
                         "event=round query=partial round=1 asked=12 sent=8 replies=8 "
                         "unanswered=4 ended=replies waiting_for=0 send_ms=",
                         0) == 0;
            }) == 1);
    }
    gateway.reset();
  }
}

namespace {

// An impostor dials as a phone does (serve_device_reconnecting): again after a transient failure,
// until refused (final) or 60 s are up. A connection that fails before its stream reaches the
// gateway is neither refused nor counted: Debian's gRPC 1.51 client fails about one connect in
// 850 in a fresh process (it reads connect()'s errno after other calls: "failed to connect to
// all addresses ... No such file or directory", seen in a trace), and a loaded machine may stall
// a TLS handshake past the gateway's handshake timeout.
// `retried` gets the sessions that ended otherwise, for the test's message; `stop` (the thread's)
// ends it sooner.
Status serve_until_refused(link::DeviceConnection connection, client::Device& device,
                           std::vector<std::string>& retried, std::stop_token stop) {
  std::stop_source give_up;
  std::stop_callback forward(stop, [&] { give_up.request_stop(); });
  connection.allow_simulation_randomness = true;
  connection.stop = give_up.get_token();
  std::jthread deadline([&](std::stop_token done) {
    std::mutex mutex;
    std::condition_variable_any never;
    std::unique_lock lock(mutex);
    never.wait_for(lock, done, 60s, [] { return false; });
    give_up.request_stop();
  });
  return link::serve_device_reconnecting(connection, device, {}, [&](const Status& ended) {
    if (!ended) retried.push_back(ended.error().parameter + ": " + ended.error().message);
  });
}

}  // namespace

TEST_CASE("network: TLS and per-device credentials", "[transport][network][security]") {
  CGP_SEEDED(9103);
  test::ThrowawayCertificate tls;
  const std::size_t n = 6;
  auto points = test::uniform_square(n, 1000, seed);
  const auto config = *DeviceConfig::cgp(1e4);
  transport::GatewayOptions options;
  options.address = "127.0.0.1:0";
  options.tls_certificate_chain = tls.certificate;
  options.tls_private_key = tls.key;
  for (std::size_t i = 0; i < n; ++i)
    options.device_credentials["device-" + std::to_string(i)] =
        "secret-" + std::to_string(i * 7919);
  auto gateway = *transport::DeviceGateway::start(options);
  // An IP literal (the certificate names it too): no DNS lookup, whose c-ares resolver leaks.
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());

  std::vector<client::Device> devices;
  for (std::size_t i = 0; i < n + 4; ++i) {
    devices.push_back(client::Device::open_for_simulation(config, seed, i));
    REQUIRE(devices.back().register_component("location", 2).ok());
    double here[2] = {points[2 * (i % n)], points[2 * (i % n) + 1]};
    REQUIRE(devices.back().set_component("location", here).ok());
  }
  std::vector<Status> outcomes(n + 4);
  {
    // Before the threads: they write here until joined.
    std::vector<std::vector<std::string>> retried(n + 4);
    std::vector<std::jthread> threads, impostors;
    // The devices serve until the gateway stops: it stops before they are joined, however the
    // block is left (a failed REQUIRE too).
    struct StopFirst {
      std::unique_ptr<transport::DeviceGateway>& running;
      ~StopFirst() { running.reset(); }
    } stop_first{gateway};
    for (std::size_t i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        outcomes[i] =
            test::serve_simulated_device({address, "device-" + std::to_string(i),
                                          "secret-" + std::to_string(i * 7919), tls.certificate},
                                         devices[i]);
      });
    // A wrong credential, another device's id with its own credential, plaintext to a TLS
    // server, no credential: all refused. Each impostor ends on its own (refused, or after 60 s
    // of dialling), so the test joins them instead of polling the gateway's counters.
    impostors.emplace_back([&](std::stop_token stop) {
      outcomes[n] = serve_until_refused({address, "device-0", "guess", tls.certificate}, devices[n],
                                        retried[n], stop);
    });
    impostors.emplace_back([&](std::stop_token stop) {
      outcomes[n + 1] = serve_until_refused(
          {address, "device-1", "secret-" + std::to_string(2 * 7919), tls.certificate},
          devices[n + 1], retried[n + 1], stop);
    });
    impostors.emplace_back([&] {  // one session: every dial of it fails the same way
      outcomes[n + 2] = test::serve_simulated_device(
          {address, "device-2", "secret-" + std::to_string(2 * 7919), ""}, devices[n + 2]);
    });
    impostors.emplace_back([&](std::stop_token stop) {  // no credential at all
      outcomes[n + 3] = serve_until_refused({address, "device-3", "", tls.certificate, {}},
                                            devices[n + 3], retried[n + 3], stop);
    });
    REQUIRE(gateway->wait_for_devices(n, 20s));
    transport::NetworkFleet fleet(*gateway, device_ids(n), 2, 1e4, 10s);
    BudgetMirror mirror(n, fleet.initial_budget());
    auto rho = test::charge_everyone(1e3);  // exact answers
    QueryOptions query;
    query.method = Method::BM0;
    query.query_id = "tls";
    double lo[2] = {0, 0}, hi[2] = {500, 500};
    const geometry::Region range = *geometry::Box::create(lo, hi);
    auto result = range_count(fleet, mirror, range, rho, query);
    REQUIRE(result.has_value());
    CHECK(result->estimate == static_cast<double>(exact_count(points, 2, range)));
    CHECK(result->report.unanswered.empty());
    CHECK(result->report.refused.empty());
    // The gateway is still up: an impostor whose handshake is slow on a loaded machine gets its
    // refusal, not the UNAVAILABLE of a gateway shutting down.
    for (auto& impostor : impostors) impostor.join();
    for (std::size_t i : {n, n + 1, n + 3}) {
      std::string sessions_before;
      for (const std::string& ended : retried[i]) sessions_before += "; before: " + ended;
      INFO("impostor " << i << ": "
                       << (outcomes[i].ok()
                               ? std::string("not refused in 60 s")
                               : outcomes[i].error().parameter + ": " + outcomes[i].error().message)
                       << sessions_before);
      REQUIRE_FALSE(outcomes[i].ok());
      CHECK(outcomes[i].error().parameter == "credential");
    }
    CHECK_FALSE(outcomes[n + 2].ok());  // plaintext against TLS
    // Each refusal is counted before its status is sent: all three are in by now.
    CHECK(gateway->counters().refused_connections == 3);
    // The impostors never answered anything: their devices spent nothing.
    for (std::size_t i = n; i < n + 4; ++i) CHECK(devices[i].spent() == 0);
  }
}

TEST_CASE("network: a device that cannot reach its coordinator says why", "[transport][network]") {
  // A port nothing listens on: a gateway's, once it has stopped.
  std::string address;
  {
    auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
    address = "127.0.0.1:" + std::to_string(gateway->port());
  }
  auto device = client::Device::open_for_simulation(*DeviceConfig::cgp(1.0), 1, 0);
  const Status served = test::serve_simulated_device({address, "device-0", "", ""}, device);
  REQUIRE_FALSE(served.ok());
  CHECK(served.error().code == ErrorCode::unavailable);
  CHECK(served.error().parameter == "coordinator");
  // The transport's own reason follows (gRPC's dial error), for the device's log.
  CHECK_THAT(served.error().message,
             Catch::StartsWith("coordinator: cannot reach " + address + " ("));
  CHECK(device.spent() == 0);
}

TEST_CASE("network: a replayed round gets the identical answer and no new charge",
          "[transport][network]") {
  CGP_SEEDED(9104);
  const std::size_t n = 5;
  auto points = test::uniform_square(n, 1000, seed);
  const auto config = *DeviceConfig::cgp(1.0);
  auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  {
    RemoteDevices remote(config, points, seed, address, n);
    REQUIRE(gateway->wait_for_devices(n, 20s));
    transport::NetworkFleet fleet(*gateway, device_ids(n), 2, 1.0, 10s);
    std::vector<UserId> users(n);
    std::iota(users.begin(), users.end(), UserId{0});
    std::vector<double> rho(n, 1e-3);
    RoundRequest request;
    request.query_id = "replay";
    request.users = users;
    request.rho = rho;
    RoundReplies first, second;
    fleet.ask(request, first);
    std::vector<double> spent;
    for (auto& d : remote.devices) spent.push_back(d.spent());
    fleet.ask(request, second);  // e.g. a coordinator retrying after a timeout
    CHECK(second.values == first.values);
    for (std::size_t i = 0; i < n; ++i) CHECK(remote.devices[i].spent() == spent[i]);
    gateway.reset();
  }
}

TEST_CASE("network: a device listed twice in a round is asked once and the round does not wait",
          "[transport][network]") {
  // A second slot for the same device id used to be counted as
  // awaited and never settled, so the round waited out its whole deadline.
  CGP_SEEDED(9103);
  auto points = test::uniform_square(2, 1000, seed);
  const auto config = *DeviceConfig::cgp(1.0);
  auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  RemoteDevices remote(config, points, seed, address, 2);
  REQUIRE(gateway->wait_for_devices(2, 20s));
  // Users 0 and 1 are both "device-0" to this fleet.
  transport::NetworkFleet fleet(*gateway, {"device-0", "device-0"}, 2, 1.0, 5s);
  const std::vector<UserId> users{0, 1};
  const std::vector<double> rho(2, 1e-3);
  RoundRequest request;
  request.query_id = "twice";
  request.users = users;
  request.rho = rho;
  RoundReplies replies;
  fleet.ask(request, replies);
  CHECK(replies.kind[0] == ReplyKind::answered);
  CHECK(replies.kind[1] == ReplyKind::rejected);  // was no_answer, after the whole deadline
  CHECK(gateway->counters().requests == 1);
}

TEST_CASE("network: a round of 1,500 devices goes out in parallel parts, each device asked once",
          "[transport][network]") {
  // The gateway pushes a round from one thread per core in parts of 256 devices or more
  // (DeviceGateway::run_round): every asked device gets exactly one request a round, answers
  // it once, and the report's charges are what the devices' ledgers hold.
  CGP_SEEDED(9131);
  const std::size_t n = 1500;
  auto points = test::uniform_square(n, 2000, seed);
  const auto config = *DeviceConfig::cgp(1.0);
  test::MixedFleet devices(config, points, seed, n, 0, 0ms);
  transport::NetworkFleet fleet(*devices.gateway, device_ids(n), 2, 1.0, 20s);
  BudgetMirror mirror(n, fleet.initial_budget());
  double lo[2] = {500, 500}, hi[2] = {1500, 1500};
  QueryOptions options;
  options.method = Method::PM1;
  options.rounds = 4;
  options.query_id = "parallel-pushes";
  auto result = range_count(fleet, mirror, *geometry::Box::create(lo, hi),
                            test::charge_everyone(1e-3), options);
  REQUIRE(result.has_value());
  CHECK(result->report.unanswered.empty());
  CHECK(result->report.rejected.empty());
  const std::size_t asked = std::accumulate(result->report.asked_per_round.begin(),
                                            result->report.asked_per_round.end(), std::size_t{0});
  CHECK(asked >= n);  // the first round asks everyone
  const auto counters = devices.gateway->counters();
  CHECK(counters.requests == asked);
  CHECK(counters.replies == asked);
  CHECK(counters.late_replies == 0);
  for (std::size_t u = 0; u < n; ++u) {
    INFO("device " << u);
    CHECK(result->report.charged[u].value() == Approx(devices.spent(u)).epsilon(1e-12));
  }
}
