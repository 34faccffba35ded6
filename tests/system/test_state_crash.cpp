// A coordinator killed in mid-query restarted with a mirror above what its
// devices had left (the query's charges were saved only when it finished: 0.00099375 shown,
// 0.0009875 held), and the killed query's id could be used again. Now each round's worst-case
// charges are on disk before its requests leave; a restart charges them and reserves the id.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cgp/analyst/analyst_client.hpp"
#include "cgp/link/device_client.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/gateway.hpp"
#include "coordinator_state.hpp"
#include "network_fixtures.hpp"
#include "simulation/fleet_fixtures.hpp"
#include "state_reader.hpp"
#include "support/seed.hpp"

extern char** environ;

using namespace cgp;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

pid_t spawn(std::vector<std::string> arguments) {
  std::vector<char*> argv;
  for (auto& a : arguments) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
  return pid;
}

int run(std::vector<std::string> arguments) {
  const pid_t pid = spawn(std::move(arguments));
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int free_port() {
  auto probe = transport::DeviceGateway::start("127.0.0.1:0");
  REQUIRE(probe.has_value());
  return (*probe)->port();
}

}  // namespace

TEST_CASE(
    "state: a coordinator killed mid-query restarts with a mirror no device's ledger is "
    "below, and the query's id reserved",
    "[transport][state]") {
  CGP_SEEDED(9433);
  const fs::path dir = fs::temp_directory_path() / ("cgp-crash-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string coordinator = CGP_COORDINATOR_PATH;
  const std::string devices_file = (dir / "devices.csv").string(),
                    analyst_file = (dir / "analyst").string(),
                    state_file = (dir / "coordinator.state").string();
  const std::size_t n = 40;
  REQUIRE(run({coordinator, "credential", "--out", analyst_file}) == 0);
  REQUIRE(run({coordinator, "enrol", "--devices", devices_file, "--count", std::to_string(n),
               "--secrets-out", (dir / "secrets.csv").string()}) == 0);
  std::string secret;
  std::getline(std::ifstream(analyst_file), secret);
  std::vector<std::pair<std::string, std::string>> enrolled;  // id, credential
  {
    std::ifstream in(dir / "secrets.csv");
    for (std::string line; std::getline(in, line);)
      enrolled.emplace_back(line.substr(0, line.find(',')), line.substr(line.find(',') + 1));
  }
  REQUIRE(enrolled.size() == n);
  const auto points = test::uniform_square(n, 1000, seed);
  const auto config = *DeviceConfig::cgp(1.0);
  std::vector<client::Device> devices;  // their ledgers outlive every coordinator below
  devices.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    devices.push_back(client::Device::open_for_simulation(config, seed, i));
    REQUIRE(devices.back().register_component("location", 2).ok());
    REQUIRE(devices.back().set_component("location", std::span(points).subspan(2 * i, 2)).ok());
  }
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> serve = {coordinator,
                                          "serve",
                                          "--listen",
                                          address,
                                          "--devices",
                                          devices_file,
                                          "--analyst-credential",
                                          analyst_file,
                                          "--state",
                                          state_file,
                                          "--budget",
                                          "1",
                                          "--quiet"};
  auto analyst_now = [&]() -> std::optional<analyst::AnalystClient> {
    for (int attempt = 0; attempt < 300; ++attempt) {
      auto analyst =
          analyst::AnalystClient::connect({address, secret, "", 30s, std::nullopt, std::nullopt});
      if (analyst && analyst->status()) return std::move(*analyst);
      std::this_thread::sleep_for(50ms);
    }
    return std::nullopt;
  };
  double lo[2] = {0, 0}, hi[2] = {500, 500};
  const geometry::Region range = *geometry::Box::create(lo, hi);
  std::mt19937_64 rng(seed);
  std::size_t killed_mid_query = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    INFO("attempt " << attempt);
    pid_t server = spawn(serve);
    auto analyst = analyst_now();
    REQUIRE(analyst.has_value());
    {
      // Each device answers 30 ms late: a round lasts long enough to be cut.
      std::vector<std::jthread> serving;
      for (std::size_t i = 0; i < n; ++i)
        serving.emplace_back([&, i](std::stop_token stop) {
          link::DeviceConnection connection{
              address, enrolled[i].first, enrolled[i].second, "", 30ms, stop};
          (void)test::serve_simulated_device(connection, devices[i]);
        });
      REQUIRE(test::eventually([&] {
        auto status = analyst->status();
        return status && status->connected == n;
      }));
      const std::string query_id = "killme-" + std::to_string(attempt);
      const long cut_at = 2 + static_cast<long>(rng() % 8);  // round 2..9 of 16
      std::jthread query([&] {
        coordinator::QueryOptions options;
        options.method = coordinator::Method::PM1;
        options.rounds = 16;
        options.query_id = query_id;
        (void)analyst->range_count(range, analyst::RemoteCharges::fixed(coordinator::Charge{0.001}),
                                   options);
      });
      test::StateReader state(state_file);
      const bool reached =
          test::eventually([&] { return state.latest_round(query_id) >= cut_at; }, 20000ms);
      kill(server, SIGKILL);
      waitpid(server, nullptr, 0);
      if (reached && state.latest_round(query_id) > 0) ++killed_mid_query;
      query.join();
    }  // every device's stream has ended: no request reaches a ledger from here on

    server = spawn(serve);
    analyst = analyst_now();
    REQUIRE(analyst.has_value());
    {
      // The killed query's id is taken: devices hold its rounds in their ledgers.
      coordinator::QueryOptions options;
      options.query_id = "killme-" + std::to_string(attempt);
      auto again = analyst->range_count(
          range, analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), options);
      REQUIRE_FALSE(again.has_value());
      CHECK(again.error().code == ErrorCode::already_exists);
      CHECK(again.error().parameter == "query_id");
      test::StateReader state(state_file);
      CHECK(state.intents() == 0);  // charged once, then settled
      const auto mirror = state.mirror();
      for (std::size_t i = 0; i < n; ++i) {
        const auto kept = mirror.find(enrolled[i].first);
        const double shown = kept == mirror.end() ? config.rho_capacity() : kept->second;
        const double held = config.rho_capacity() - devices[i].spent();
        INFO(enrolled[i].first << ": mirror " << shown << ", ledger leaves " << held);
        CHECK(shown <= held + 1e-15);
      }
    }
    kill(server, SIGTERM);
    waitpid(server, nullptr, 0);
  }
  // Every attempt was cut with rounds still to come (a query that ran to its end would test
  // nothing): each round waits for 30 ms replies, 16 rounds, cut by round 9.
  CHECK(killed_mid_query == 3);
  fs::remove_all(dir);
}

TEST_CASE("state: a restart charges what a crash left to every device, enrolled or not, once",
          "[transport][state]") {
  // Intents of a device taken out of the enrolment before the restart
  // were dropped with the rest, so that device came back later with its pre-query value.
  const fs::path dir = fs::temp_directory_path() / ("cgp-intents-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "coordinator.state").string();
  const double capacity = DeviceConfig::cgp(1.0)->rho_capacity();
  {
    auto state = *transport::detail::CoordinatorState::open(path);
    REQUIRE(state->save_mirror({{"gone", 0.5}}).ok());
    const std::string kept = "device-0", gone = "gone";
    // Two rounds of "cut-1" reached both devices; the coordinator died before it settled them.
    for (std::uint32_t round : {1u, 2u})
      REQUIRE(state->record_intent("cut-1", round, {&kept, &gone}, {0.125, 0.125}).ok());
  }
  transport::CoordinatorOptions options;
  options.device_ids = {"device-0"};
  options.state_path = path;
  for (int start = 0; start < 2; ++start) {  // the second start charges nothing more
    auto service = *transport::CoordinatorService::start(options);
    auto analyst = *analyst::AnalystClient::connect(
        {"127.0.0.1:" + std::to_string(service->port()), "", "", 30s, std::nullopt, std::nullopt});
    coordinator::QueryOptions query;
    query.query_id = "cut-1";
    double lo[2] = {0, 0}, hi[2] = {1, 1};
    auto again =
        analyst.range_count(*geometry::Box::create(lo, hi),
                            analyst::RemoteCharges::fixed(coordinator::Charge{0.01}), query);
    REQUIRE_FALSE(again.has_value());
    CHECK(again.error().code == ErrorCode::already_exists);
    service.reset();
    test::StateReader state(path);
    CHECK(state.intents() == 0);
    const auto mirror = state.mirror();
    CHECK(mirror.at("device-0") <= capacity - 0.25);
    CHECK(mirror.at("device-0") == Approx(capacity - 0.25).epsilon(1e-12));
    CHECK(mirror.at("gone") <= 0.25);  // 0.5 stored, 0.25 charged
    CHECK(mirror.at("gone") == Approx(0.25).epsilon(1e-12));
  }
  fs::remove_all(dir);
}
