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
#include "support/seed.hpp"

extern char** environ;

using namespace cgp;
using namespace cgp::coordinator;
using namespace std::chrono_literals;

namespace {

pid_t spawn(const std::vector<std::string>& arguments) {
  std::vector<char*> argv;
  for (const auto& a : arguments) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
  return pid;
}

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
  const std::vector<double> asked(n, privacy::rho_within_charge(rho));
  double lo[2] = {0, 0}, hi[2] = {100, 100};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back("device-" + std::to_string(i));

  auto run_session = [&](const std::string& query_id, BudgetMirror& mirror) {
    auto gateway = *transport::DeviceGateway::start("127.0.0.1:0");
    const std::string address = "127.0.0.1:" + std::to_string(gateway->port());
    std::vector<pid_t> devices;
    for (std::size_t i = 0; i < n; ++i) {
      devices.push_back(
          spawn({CGP_DEVICE_PATH, "--coordinator", address, "--id", ids[i], "--ledger",
                 (dir / (ids[i] + ".db")).string(), "--budget", std::to_string(budget),
                 "--location", std::to_string(50 + 10 * i) + ",50"}));
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
  const double charge = privacy::device_charge(asked[0]);
  for (UserId u = 0; u < n; ++u) {
    CHECK(first.report.charged[u] == Approx(charge).epsilon(1e-9));
    CHECK(second.report.charged[u] == Approx(charge).epsilon(1e-9));
    CHECK(second_mirror.remaining(u) <=
          budget - 2 * charge + 1e-12);  // the first charge is remembered
  }
  std::filesystem::remove_all(dir);
}
