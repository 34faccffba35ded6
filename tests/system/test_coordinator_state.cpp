// Results and the budget mirror outlive a coordinator restart, within a
// retention bound; keepalive notices a peer that froze. On 51cfbc1 a restarted coordinator
// had no results (GetResult NOT_FOUND), asked devices for budget they had spent, and kept
// every result in memory without limit.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "network_fixtures.hpp"
#include "simulation/fleet_fixtures.hpp"
#include "support/seed.hpp"

extern char** environ;

using namespace cgp;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST_CASE("state: results and the mirror survive a restart and results are bounded",
          "[transport][state]") {
  CGP_SEEDED(9401);
  const std::size_t n = 30;
  auto points = test::uniform_square(n, 1000, seed);
  const fs::path dir = fs::temp_directory_path() / ("cgp-state-" + std::to_string(getpid()));
  fs::create_directories(dir);
  transport::CoordinatorOptions options;
  for (std::size_t i = 0; i < n; ++i) options.device_ids.push_back("device-" + std::to_string(i));
  options.state_path = (dir / "coordinator.state").string();
  options.retention.max_results = 3;
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  options.gateway.address = address;
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0);
  swarm_options.seed = seed;
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, test::swarm_members(points, n));
  REQUIRE(service->gateway().wait_for_devices(n, 30s));

  // A second coordinator on the same state file is refused by name.
  {
    auto other = options;
    other.gateway.address = "127.0.0.1:0";
    auto second = transport::CoordinatorService::start(other);
    REQUIRE_FALSE(second.has_value());
    CHECK(second.error().parameter == "state");
  }

  double lo[2] = {0, 0}, hi[2] = {500, 500};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  coordinator::QueryOptions query;
  query.method = coordinator::Method::BM1;  // one round: each device charged the whole ρ
  std::vector<double> estimates;
  {
    auto analyst =
        *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
    for (const char* id : {"q1", "q2", "q3", "q4"}) {
      query.query_id = id;
      auto counted = analyst.range_count(
          range, analyst::RemoteCharges::fixed(coordinator::Charge{0.15}), query);
      REQUIRE(counted.has_value());
      estimates.push_back(counted->estimate);
    }
  }

  service.reset();  // the coordinator goes down; the devices keep their ledgers
  service = *transport::CoordinatorService::start(options);
  REQUIRE(service->gateway().wait_for_devices(n, 30s));
  auto analyst =
      *analyst::AnalystClient::connect({address, "", "", 30s, std::nullopt, std::nullopt});
  auto kept = analyst.result("q4");
  REQUIRE(kept.has_value());
  CHECK(kept->estimate == estimates[3]);
  CHECK(kept->coverage.answered == n);
  CHECK_FALSE(analyst.result("q1").has_value());  // past the retention bound (3)
  query.query_id = "q1";                          // pruned, but devices still hold it: never reused
  auto evicted =
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.15}), query);
  REQUIRE_FALSE(evicted.has_value());
  CHECK(evicted.error().code == ErrorCode::already_exists);
  query.query_id = "q3";
  auto reused =
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.15}), query);
  REQUIRE_FALSE(reused.has_value());  // ids stay unique across the restart
  CHECK(reused.error().parameter == "query_id");
  auto status = analyst.status();
  REQUIRE(status.has_value());
  CHECK(status->queries == 4);

  // 4 × 0.15 = 0.6 spent of 1.0: the restored mirror knows 0.4 is left, so 0.5 is not asked
  // of anyone (on 51cfbc1 the fresh mirror asked every device, and each refused).
  const auto before = service->gateway().counters().requests;
  // Refused users are expected here: neither coverage nor their share of the answer is checked.
  auto lenient = *analyst::AnalystClient::connect({address, "", "", 30s, 0.0, 1.0});
  query.query_id = "q5";
  auto over =
      lenient.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.5}), query);
  REQUIRE(over.has_value());
  CHECK(over->coverage.refused == n);
  CHECK(service->gateway().counters().requests == before);
  // 0.3 still fits, and is asked.
  query.query_id = "q6";
  auto fits =
      analyst.range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.3}), query);
  REQUIRE(fits.has_value());
  CHECK(fits->coverage.answered == n);
  for (std::size_t i = 0; i < n; ++i) CHECK(swarm->spent(i) <= 1.0);
  swarm.reset();
  service.reset();
  fs::remove_all(dir);
}

TEST_CASE("state: a bad state file is refused by name", "[transport][state]") {
  const fs::path dir = fs::temp_directory_path() / ("cgp-badstate-" + std::to_string(getpid()));
  fs::create_directories(dir);
  transport::CoordinatorOptions options;
  options.device_ids = {"d0"};
  for (const std::string& bad : {(dir / "missing-dir" / "x").string(), dir.string()}) {
    INFO(bad);
    options.state_path = bad;
    auto refused = transport::CoordinatorService::start(options);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().parameter == "state");
  }
  {  // a file that is not a SQLite database
    std::ofstream(dir / "text") << "not a database\n";
    options.state_path = (dir / "text").string();
    auto refused = transport::CoordinatorService::start(options);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().parameter == "state");
  }
  {
    // An empty file (one that lost its contents) started fresh, its mirror
    // and used ids silently gone. Now refused by name unless started anew on purpose.
    const auto empty = dir / "empty.state";
    std::ofstream(empty).flush();
    options.state_path = empty.string();
    auto refused = transport::CoordinatorService::start(options);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().parameter == "state");
    CHECK(refused.error().message.find("--init-state") != std::string::npos);
    CHECK(fs::file_size(empty) == 0);  // left as it was
    options.init_state = true;
    CHECK(transport::CoordinatorService::start(options).has_value());
    options.init_state = false;
    CHECK(transport::CoordinatorService::start(options).has_value());  // now a store
  }
  {
    // Another program's SQLite database: refused, and not written to.
    const auto foreign = dir / "foreign.db";
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(foreign.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "CREATE TABLE notes (text TEXT)", nullptr, nullptr, nullptr) ==
            SQLITE_OK);
    sqlite3_close(db);
    const auto size = fs::file_size(foreign);
    options.state_path = foreign.string();
    for (bool init : {false, true}) {
      options.init_state = init;
      auto refused = transport::CoordinatorService::start(options);
      REQUIRE_FALSE(refused.has_value());
      CHECK(refused.error().parameter == "state");
      CHECK(refused.error().message.find("not a cgpkit coordinator state file") !=
            std::string::npos);
    }
    options.init_state = false;
    CHECK(fs::file_size(foreign) == size);
    sqlite3* check = nullptr;
    REQUIRE(sqlite3_open(foreign.c_str(), &check) == SQLITE_OK);
    CHECK(sqlite3_exec(check, "SELECT * FROM meta", nullptr, nullptr, nullptr) != SQLITE_OK);
    sqlite3_stmt* mode = nullptr;  // still in its own journal mode (WAL would be a write)
    REQUIRE(sqlite3_prepare_v2(check, "PRAGMA journal_mode", -1, &mode, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(mode) == SQLITE_ROW);
    CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(mode, 0))) == "delete");
    sqlite3_finalize(mode);
    sqlite3_close(check);
  }
  options.state_path.clear();
  options.retention.max_results = 0;
  auto refused = transport::CoordinatorService::start(options);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().parameter == "retention");
  fs::remove_all(dir);
}

TEST_CASE("keepalive: a device process that freezes is noticed and dropped", "[transport][state]") {
  // A stopped process's kernel still acknowledges TCP, so only an HTTP/2 ping that goes
  // unanswered shows the device is gone (a NAT that dropped the flow looks the same).
  transport::GatewayOptions options;
  options.limits.keepalive_time = 300ms;
  options.limits.keepalive_timeout = 300ms;
  std::mutex log_mutex;
  std::vector<std::string> log;
  options.log = [&](const std::string& line) {
    std::lock_guard lock(log_mutex);
    log.push_back(line);
  };
  auto gateway = *transport::DeviceGateway::start(options);
  const fs::path dir = fs::temp_directory_path() / ("cgp-keepalive-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::vector<std::string> arguments = {CGP_DEVICE_PATH,
                                        "--coordinator",
                                        "127.0.0.1:" + std::to_string(gateway->port()),
                                        "--id",
                                        "frozen",
                                        "--ledger",
                                        (dir / "ledger.db").string(),
                                        "--budget",
                                        "1",
                                        "--location",
                                        "1,2"};
  std::vector<char*> argv;
  for (auto& a : arguments) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t device = 0;
  REQUIRE(posix_spawn(&device, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
  REQUIRE(gateway->wait_for_devices(1, 30s));
  kill(device, SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  bool dropped = false;
  while (!dropped && std::chrono::steady_clock::now() - stopped < 30s) {
    std::this_thread::sleep_for(50ms);
    dropped = gateway->connected() == 0;
  }
  CHECK(dropped);
  kill(device, SIGKILL);
  waitpid(device, nullptr, 0);
  {
    std::lock_guard lock(log_mutex);
    CHECK(std::count_if(log.begin(), log.end(), [](const std::string& line) {
            return line.find("event=disconnect device=frozen") != std::string::npos;
          }) == 1);
  }
  gateway.reset();
  fs::remove_all(dir);
}
