// cgp-sim accounting: 002's Fig. 2/3 setting — the RDP bound lies above the
// profile bound (Thm 5.2), which lies above the exact profile of one instance (the best of K
// Gaussian scores): a bound below an instance would be unsound.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cgp/common/privacy/selection_profiles.hpp"
#include "cgp/experiments/accounting_experiment.hpp"

using namespace cgp;
using namespace cgp::experiments;
namespace fs = std::filesystem;

TEST_CASE("accounting: RDP >= Thm 5.2 >= the exact profile of the best of K Gaussian scores",
          "[sim][accounting]") {
  AccountingSettings settings;
  settings.ms = {30, 300};
  settings.epsilons = {0.5, 1, 1.5, 2, 2.5, 3, 4};
  auto result = run_accounting(settings);
  REQUIRE(result.has_value());
  REQUIRE(result->rows.size() == 2);
  // 002's reference values for Thm 5.2 (σ = 4, η = 1, δ = 1e-6).
  CHECK(result->rows[0].profile == Approx(2.2883).margin(5e-5));
  CHECK(result->rows[1].profile == Approx(2.7938).margin(5e-5));
  for (const AccountingRow& row : result->rows) {
    INFO("m = " << row.m);
    CHECK(row.rdp > row.profile);
    CHECK(row.profile > row.exact);
    CHECK(row.exact > 0);
  }
  for (const ProfilePoint& p : result->curves) {
    INFO("m = " << p.m << ", epsilon = " << p.epsilon);
    CHECK(p.rdp >= p.profile * (1 - 1e-9));
    CHECK(p.profile >= p.exact);
  }
}

TEST_CASE("accounting: with K = 1 the exact profile is the Gaussian mechanism's",
          "[sim][accounting]") {
  // γ → 1 makes K = 1 almost surely: the best of one score is the Gaussian mechanism itself.
  for (double eps : {0.0, 0.3, 1.0, 2.0}) {
    INFO("epsilon " << eps);
    const double exact = *best_of_gaussian_scores_delta(1, 1 - 1e-12, 0.5, eps);
    const double gaussian = *privacy::gaussian_delta_upper(0.5, eps);
    CHECK(exact == Approx(gaussian).epsilon(1e-7));
  }
  CHECK(best_of_gaussian_scores_delta(-2, 0.5, 0.5, 1).error().parameter == "eta");
  CHECK(best_of_gaussian_scores_delta(1, 1.5, 0.5, 1).error().parameter == "gamma");
}

TEST_CASE("accounting: cgp-sim accounting writes rows, curves and a plot, bad flags exit 2",
          "[sim][accounting]") {
  const fs::path dir = fs::temp_directory_path() / ("cgp-accounting-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto run = [](const std::string& arguments) {
    FILE* pipe =
        ::popen((std::string(CGP_SIM_PATH) + " accounting " + arguments + " 2>&1").c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::string out;
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
      out.append(buffer, n);
    const int status = ::pclose(pipe);
    return std::pair{WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  };
  const auto [code, out] = run("--m 30 --epsilons 1,2,3 --json " + (dir / "a.json").string() +
                               " --plot " + (dir / "a").string());
  REQUIRE(code == 0);
  CHECK(out.find("2.2883") != std::string::npos);
  std::ifstream in(dir / "a.json");
  const auto json = nlohmann::json::parse(in);
  CHECK(json["rows"].size() == 1);
  CHECK(json["curves"].size() == 3);
  CHECK(fs::file_size(dir / "a.png") > 1000);
  for (const auto& [flags, name] :
       std::vector<std::pair<std::string, std::string>>{{"--m 1", "m"},
                                                        {"--sigma 0", "sigma"},
                                                        {"--delta 2", "delta"},
                                                        {"--eta -1", "eta"},
                                                        {"--epsilons -1", "epsilons"}}) {
    INFO(flags);
    const auto [bad_code, bad_out] = run(flags);
    CHECK(bad_code == 2);
    CHECK(bad_out.find(name) != std::string::npos);
  }
  fs::remove_all(dir);
}
