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

#include "cgp/experiments/dataset.hpp"
#include "cgp/swarm/device_swarm.hpp"
#include "cgp/transport/coordinator_service.hpp"
#include "support/run_program.hpp"

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

}  // namespace

TEST_CASE("cgp-sim --fleet runs range, kde, knn and multi-range over a live coordinator",
          "[transport][sim]") {
  const std::size_t n = 300;
  const std::uint64_t seed = 1;  // cgp-sim's default: the same synthetic city as the swarm's
  const auto city = experiments::synthetic_locations(n, seed);
  transport::CoordinatorOptions options;
  for (std::size_t i = 0; i < n; ++i) options.device_ids.push_back("device-" + std::to_string(i));
  options.device_budget = 1.0;
  options.analyst_credential_sha256 = transport::sha256_of("analyst");
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1.0);
  std::vector<swarm::SwarmMember> members;
  for (std::size_t i = 0; i < n; ++i)
    members.push_back({options.device_ids[i], "", {city.points[2 * i], city.points[2 * i + 1]}});
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, std::move(members));
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
    const auto rows = nlohmann::json::parse(test::read_whole(json));
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

  // Alg. 3 over the coordinator's own adaptive allocation: m = 2 queries per repetition.
  {
    const fs::path json = dir / "multi.json", err = dir / "err.txt";
    const auto queries_before = service->gateway().counters().rounds;
    REQUIRE(run("multi-range --budget 1 --m 2 --w 4000 --methods PM1 " + fleet + " --json " +
                    json.string(),
                err) == 0);
    const auto rows = nlohmann::json::parse(test::read_whole(json));
    REQUIRE(rows.size() == 1);
    CHECK(rows[0]["query"] == "multi-range");
    CHECK(std::isfinite(rows[0]["error_mean"].get<double>()));
    CHECK(rows[0]["privsav_mean"].get<double>() < 1);  // devices were charged
    CHECK(service->gateway().counters().rounds > queries_before);
  }

  // Threshold needs the curator's id; a multi-range budget that is not the devices' is refused
  // (PrivSav would be a share of the wrong budget); a wrong credential is refused by name.
  const fs::path err = dir / "err.txt";
  CHECK(run("multi-range --budget 0.5 --m 2 --w 4000 " + fleet, err) == 2);
  CHECK(test::read_whole(err).find("--budget") != std::string::npos);
  CHECK(run("threshold --column v --q 0.5 --rho 1 " + fleet, err) == 2);
  CHECK(test::read_whole(err).find("--curator") != std::string::npos);
  std::ofstream(dir / "wrong.key") << "wrong\n";
  CHECK(run("range --rho 1e-3 --w 4000 --fleet " + address + " --analyst-credential " +
                (dir / "wrong.key").string(),
            err) == 3);
  CHECK(test::read_whole(err).find("credential") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("cgp-sim --fleet runs threshold over a live curator device", "[transport][sim]") {
  // The curator holds the count of nonzero rows of the CSV below: 420 of 1,000.
  transport::CoordinatorOptions options;
  options.device_ids = {"curator"};
  options.dimension = 1;
  options.device_budget = 1000;
  auto service = *transport::CoordinatorService::start(options);
  const std::string address = "127.0.0.1:" + std::to_string(service->port());
  swarm::SwarmOptions swarm_options;
  swarm_options.coordinator_address = address;
  swarm_options.config = *DeviceConfig::cgp(1000);
  auto swarm = *swarm::DeviceSwarm::start(swarm_options, {{"curator", "", {420}}});
  REQUIRE(service->gateway().wait_for_devices(1, 30s));

  const fs::path dir =
      fs::temp_directory_path() / ("cgp-sim-curator-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream csv(dir / "table.csv");
    csv << "v\n";
    for (int i = 0; i < 1000; ++i) csv << (i < 420 ? 1 : 0) << "\n";
  }
  // ρ = 10 per query: σ ≤ 1/√5 per round against gaps of 80 and 30 (an error needs > 60σ).
  const fs::path json = dir / "rows.json", err = dir / "err.txt";
  REQUIRE(run("threshold --data " + (dir / "table.csv").string() +
                  " --column v --q 0.5,0.39 --rho 10 --reps 2 --fleet " + address +
                  " --curator curator --json " + json.string(),
              err) == 0);
  const auto rows = nlohmann::json::parse(test::read_whole(json));
  REQUIRE(rows.size() == 4);  // BM1, PM1 × two q
  for (const auto& row : rows) CHECK(row["error_mean"].get<double>() == 0);
  CHECK(swarm->spent(0) > 0);
  CHECK(run("threshold --data " + (dir / "table.csv").string() +
                " --column v --q 0.5 --rho 10 --curator curator",
            err) == 2);  // --curator without --fleet
  fs::remove_all(dir);
}
