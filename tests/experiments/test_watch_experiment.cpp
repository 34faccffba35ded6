// cgp-sim watch: the built-in movers, trajectory files, calibration to the
// stated quality with the real device's Laplace watch and releases, and the program's errors.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/selection.hpp"
#include "cgp/common/watch.hpp"
#include "cgp/experiments/watch_experiment.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::experiments;
namespace fs = std::filesystem;

namespace {

double distance(const double* p, const std::array<double, 2>& site) {
  return std::hypot(p[0] - site[0], p[1] - site[1]);
}

struct Program {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

Program run_watch_sim(const std::string& arguments) {
  Program run;
  FILE* pipe = ::popen((std::string(CGP_SIM_PATH) + " " + arguments + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    run.out.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace

TEST_CASE("watch experiment: built-in movers visit or pass by as stated", "[sim][watch]") {
  CGP_SEEDED(5501);
  const Geofence fence;
  const auto paths = synthetic_trajectories(200, 80, fence, 40, seed);
  REQUIRE(paths.users == 200);
  for (std::size_t u = 0; u < paths.users; ++u) {
    INFO("user " << u);
    double closest = 1e300;
    for (std::uint64_t t = 1; t <= paths.ticks; ++t)
      closest = std::min(closest, distance(paths.at(u, t), fence.site));
    if (u % 2 == 0) {
      // Visitors arrive within radius/2 (+ their 10 m jitter) by 3/4 of the horizon and stay.
      CHECK(closest <= fence.radius / 2 + 60);
      CHECK(distance(paths.at(u, paths.ticks), fence.site) <= fence.radius / 2 + 60);
      CHECK(distance(paths.at(u, 1), fence.site) > fence.radius);
    } else {
      CHECK(closest >= fence.radius + fence.band);
    }
  }
  // Reproducible from the seed.
  CHECK(synthetic_trajectories(200, 80, fence, 40, seed).xy == paths.xy);
}

TEST_CASE("watch experiment: trajectory files, missing ticks and bad lines", "[sim][watch]") {
  const fs::path dir = fs::temp_directory_path() / ("cgp-watch-csv-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto file = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  auto loaded = load_trajectories(
      file("ok.csv", "id,t,x,y\r\nalice,1,0,0\r\nbob,2,5,5\r\nalice,3,30,40\r\n\r\nbob,9,1,1\r\n"),
      4);
  REQUIRE(loaded.has_value());
  CHECK(loaded->users == 2);
  CHECK(loaded->ticks == 4);
  CHECK(loaded->at(0, 2)[0] == 0);  // alice's tick 2 repeats tick 1
  CHECK(loaded->at(0, 4)[1] == 40);
  CHECK(loaded->at(1, 1)[0] == 5);  // before bob's first tick: his first position
  CHECK(loaded->at(1, 4)[0] == 5);  // tick 9 lies beyond the horizon
  const auto bad_line = load_trajectories(file("bad.csv", "a,1,0,0\nb,1,0,0\nc,x,1,1\n"), 4);
  REQUIRE_FALSE(bad_line.has_value());
  CHECK(bad_line.error().parameter == "trajectories");
  CHECK(bad_line.error().message.find("line 3") != std::string::npos);
  CHECK(load_trajectories(file("t0.csv", "a,0,0,0\nb,1,0,0\n"), 4).error().message.find("tick") !=
        std::string::npos);
  CHECK(load_trajectories(file("nan.csv", "a,1,nan,0\nb,1,0,0\n"), 4)
            .error()
            .message.find("finite") != std::string::npos);
  CHECK_FALSE(load_trajectories(file("one.csv", "a,1,0,0\n"), 4).has_value());
  CHECK(load_trajectories((dir / "missing.csv").string(), 4).error().parameter == "trajectories");
  fs::remove_all(dir);
}

TEST_CASE("watch experiment: each method is calibrated to the quality and priced by its rule",
          "[sim][watch]") {
  CGP_SEEDED(5502);
  WatchSettings settings;
  settings.horizons = {30};
  settings.users = 300;
  settings.seed = seed;
  settings.quality = 0.1;
  auto rows = run_watch(settings);
  REQUIRE(rows.has_value());
  REQUIRE(rows->size() == 3);
  for (const WatchRow& row : *rows) {
    INFO(row.method);
    REQUIRE(row.reached);
    CHECK(row.false_alert <= settings.quality);
    CHECK(row.miss <= settings.quality);
    CHECK(row.visitors == 150);
  }
  const WatchRow& laplace = (*rows)[0];
  CHECK(laplace.method == "laplace");
  CHECK(laplace.rho == laplace_watch_charge(laplace.noise));
  CHECK(laplace.epsilon_per_metre == laplace.noise);
  const WatchRow& expost = (*rows)[1];
  const privacy::GaussianAboveThreshold at{expost.noise, std::sqrt(3.0) * expost.noise, -1000, 0,
                                           -450};
  CHECK(expost.epsilon_per_metre == *privacy::gaussian_at_worst_slope(at, 30));
  CHECK(expost.rho == 0);
  const WatchRow& releases = (*rows)[2];
  CHECK(releases.rho == 30 * privacy::device_charge(1 / (2 * releases.noise * releases.noise)));
  // A band of 1 cm cannot be told apart at any ε the search tries: it says so instead of lying.
  settings.fence.band = 0.01;
  settings.quality = 0.01;
  settings.methods = {"laplace"};
  auto strict = run_watch(settings);
  REQUIRE(strict.has_value());
  CHECK_FALSE((*strict)[0].reached);
}

TEST_CASE("watch experiment: cgp-sim watch prints a table and JSON, bad flags exit by name",
          "[sim][watch]") {
  const fs::path json = fs::temp_directory_path() / ("cgp-watch-" + std::to_string(::getpid()));
  const auto run =
      run_watch_sim("watch --ticks 20 --users 100 --quality 0.1 --json " + json.string());
  REQUIRE(run.exit_code == 0);
  CHECK(run.out.find("gaussian_releases") != std::string::npos);
  std::ifstream in(json);
  const auto rows = nlohmann::json::parse(in);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["method"] == "laplace");
  CHECK(rows[2]["epsilon_per_metre"].is_null());
  fs::remove(json);
  for (const auto& [flags, code, name] : std::vector<std::tuple<std::string, int, std::string>>{
           {"--ticks 0", 2, "ticks"},
           {"--methods laplace,sparse", 2, "methods"},
           {"--quality 0.7", 2, "quality"},
           {"--clamp 100", 2, "clamp"},
           {"--radius -3", 2, "radius"},
           {"--users 1", 2, "users"},
           {"--trajectories /nonexistent/t.csv", 3, "trajectories"},
           {"--rho 1", 2, "rho"}}) {
    INFO(flags);
    const auto bad = run_watch_sim("watch --users 10 --ticks 5 " + flags);
    CHECK(bad.exit_code == code);
    CHECK(bad.out.find(name) != std::string::npos);
  }
}
