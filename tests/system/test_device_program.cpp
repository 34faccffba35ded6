// cgp-device as a real process: it serves a coordinator with its SQLite ledger, and after the
// coordinator restarts and the device process starts again on the same ledger, its budget is
// intact — the second coordinator sees the first query's charge in the device's replies.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/coordinator/queries.hpp"
#include "cgp/transport/gateway.hpp"
#include "network_fixtures.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;
using namespace std::chrono_literals;

namespace {

void stop(pid_t pid) {
  // The coordinator going away ends the device; make sure, then reap it.
  for (int i = 0; i < 50; ++i) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) return;
    std::this_thread::sleep_for(100ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace

TEST_CASE("cgp-device keeps its budget across a coordinator restart",
          "[transport][device-program]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cgp-device-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::size_t n = 3;
  const double budget = 1.0, rho = 0.25;
  const auto asked = UserCharges::everyone(Charge{rho});
  double lo[2] = {0, 0}, hi[2] = {100, 100};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back("device-" + std::to_string(i));

  auto run_session = [&](const std::string& query_id, BudgetMirror& mirror) {
    auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
    const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
    std::vector<pid_t> devices;
    for (std::size_t i = 0; i < n; ++i) {
      devices.push_back(test::spawn_program({CGP_DEVICE_PATH, "--coordinator", address, "--id",
                                             ids[i], "--ledger", (dir / (ids[i] + ".db")).string(),
                                             "--budget", std::to_string(budget), "--location",
                                             std::to_string(50 + 10 * i) + ",50"}));
    }
    REQUIRE(gateway->wait_for_devices(n, 30s));
    transport::NetworkFleet fleet(*gateway, ids, 2, budget, 10s);
    QueryOptions options;
    options.method = Method::BM1;
    options.query_id = query_id;
    auto result = range_count(fleet, mirror, range, asked, options);
    REQUIRE(result.has_value());
    CHECK(result->report.unanswered.empty());
    gateway.reset();
    for (pid_t pid : devices) stop(pid);
    return *result;
  };

  BudgetMirror first_mirror(n, budget);
  auto first = run_session("before-restart", first_mirror);
  // A new coordinator with a fresh mirror: the devices' own ledgers report what is left.
  BudgetMirror second_mirror(n, budget);
  auto second = run_session("after-restart", second_mirror);
  const double charge = rho;  // BM1: one release that spends the whole cap
  for (UserId u = 0; u < n; ++u) {
    CHECK(first.report.charged[u].value() <= charge);
    CHECK(first.report.charged[u].value() == Approx(charge).epsilon(1e-9));
    CHECK(second.report.charged[u].value() <= charge);
    CHECK(second.report.charged[u].value() == Approx(charge).epsilon(1e-9));
    CHECK(second_mirror.remaining(u) <=
          budget - 2 * charge + 1e-12);  // the first charge is remembered
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("cgp-device processes killed mid-round, and a coordinator restart: one charge each",
          "[transport][device-program][faults]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("cgp-device-kill-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::size_t n = 4;
  const double budget = 1.0;
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back("device-" + std::to_string(i));
  auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
  auto start_device = [&](std::size_t i) {
    return test::spawn_program({CGP_DEVICE_PATH, "--coordinator", address, "--id", ids[i],
                                "--ledger", (dir / (ids[i] + ".db")).string(), "--budget",
                                std::to_string(budget), "--location", std::to_string(10 * i) + ",0",
                                "--reconnect"});
  };
  std::vector<pid_t> devices;
  for (std::size_t i = 0; i < n; ++i) devices.push_back(start_device(i));
  REQUIRE(gateway->wait_for_devices(n, 30s));

  std::vector<UserId> users(n);
  for (std::size_t i = 0; i < n; ++i) users[i] = static_cast<UserId>(i);
  const std::vector<double> rho(n, 0.1), small(n, 0.01);
  RoundRequest request;
  request.query_id = "kill";
  request.round = 1;
  request.statistic = StatisticKind::location;
  request.users = users;
  request.rho = rho;
  {
    // Devices 0 and 1 are killed while the round is out: they may or may not have answered.
    transport::NetworkFleet fleet(*gateway, ids, 2, budget, 2s);
    RoundReplies first;
    std::jthread killer([&] {
      std::this_thread::sleep_for(2ms);
      kill(devices[0], SIGKILL);
      kill(devices[1], SIGKILL);
    });
    fleet.ask(request, first);
  }
  for (std::size_t i = 0; i < 2; ++i) waitpid(devices[i], nullptr, 0);

  // The coordinator restarts on the same port; the killed devices start again on their ledgers;
  // the others reconnect by themselves.
  const std::string port_address = address;
  gateway.reset();
  transport::GatewayOptions again;
  again.address = port_address;
  gateway = *transport::DeviceGateway::start(again);
  for (std::size_t i = 0; i < 2; ++i) devices[i] = start_device(i);
  REQUIRE(gateway->wait_for_devices(n, 30s));

  transport::NetworkFleet fleet(*gateway, ids, 2, budget, 10s);
  RoundReplies replay, next;
  fleet.ask(request, replay);  // the same round again: cached where it was answered
  request.round = 2;
  request.rho = small;
  fleet.ask(request, next);
  const double one = privacy::device_charge(0.1), two = privacy::device_charge(0.01);
  for (std::size_t i = 0; i < n; ++i) {
    INFO("device " << i);
    REQUIRE(replay.kind[i] == ReplyKind::answered);
    REQUIRE(next.kind[i] == ReplyKind::answered);
    // Exactly one charge for round 1 whatever happened to it, then one for round 2.
    CHECK(next.remaining[i] == Approx(budget - one - two).epsilon(1e-9));
  }
  gateway.reset();
  for (pid_t pid : devices) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  std::filesystem::remove_all(dir);
}
