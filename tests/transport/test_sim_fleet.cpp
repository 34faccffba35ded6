// cgp-sim --fleet: the paper's experiments over a live coordinator (in-process service, async
// swarm holding cgp-sim's built-in synthetic city), through the Analyst API.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cgp/sim/dataset.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "cgp/transport/device_swarm.hpp"

using namespace cgp;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

int run(const std::string& arguments, const fs::path& err) {
  const std::string command =
      std::string(CGP_SIM_PATH) + " " + arguments + " >/dev/null 2>" + err.string();
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("cgp-sim --fleet runs range, kde and knn over a live coordinator", "[transport][sim]") {
  const std::size_t n = 300;
  const std::uint64_t seed = 1;  // cgp-sim's default: the same synthetic city as the swarm's
  const auto city = sim::synthetic_locations(n, seed);
  transport::CoordinatorOptions options;
  for (std::size_t i = 0; i < n; ++i) options.device_ids.push_back("device-" + std::to_string(i));
  options.device_budget = 1.0;
  options.analyst_credential_sha256 = transport::sha256_of("analyst");
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  transport::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0);
  std::vector<transport::SwarmMember> members;
  for (std::size_t i = 0; i < n; ++i)
    members.push_back({options.device_ids[i], "", {city.points[2 * i], city.points[2 * i + 1]}});
  auto swarm = *transport::DeviceSwarm::start(swarm_options, std::move(members));
  REQUIRE(service->gateway().wait_for_devices(n, 30s));

  const fs::path dir = fs::temp_directory_path() / ("cgp-sim-fleet-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "analyst.key") << "analyst\n";
  const std::string fleet = "--fleet " + address + " --analyst-credential " +
                            (dir / "analyst.key").string() + " --reps 3 --seed 1";
  for (const std::string experiment :
       {"range --rho 1e-3 --w 4000", "kde --rho 1e-3 --b 1000", "knn --rho 1e-3 --k 3"}) {
    INFO(experiment);
    const fs::path json = dir / "rows.json", err = dir / "err.txt";
    REQUIRE(run(experiment + " " + fleet + " --json " + json.string(), err) == 0);
    const auto rows = nlohmann::json::parse(slurp(json));
    REQUIRE(rows.size() == 4);  // BM0, BM1, PM0, PM1
    for (const auto& row : rows) {
      CHECK(row["reps"] == 3);
      CHECK(std::isfinite(row["error_mean"].get<double>()));
      CHECK(row["privsav_mean"].get<double>() >= 0);
    }
  }
  // Every query reached every device: nothing unanswered, and the devices were charged.
  const auto counters = service->gateway().counters();
  CHECK(counters.unanswered == 0);
  CHECK(counters.replies > 3 * 4 * 3 * n / 2);
  CHECK(swarm->spent(0) > 0);

  // What --fleet cannot do is refused by name, as is a wrong credential.
  const fs::path err = dir / "err.txt";
  CHECK(run("multi-range --budget 1 --m 2 --w 1000 " + fleet, err) == 2);
  CHECK(slurp(err).find("--fleet") != std::string::npos);
  std::ofstream(dir / "wrong.key") << "wrong\n";
  CHECK(run("range --rho 1e-3 --w 4000 --fleet " + address + " --analyst-credential " +
                (dir / "wrong.key").string(),
            err) == 3);
  CHECK(slurp(err).find("credential") != std::string::npos);
  fs::remove_all(dir);
}
