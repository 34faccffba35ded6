#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/privacy/confidence.hpp"
#include "cgp/coordinator/elimination.hpp"
#include "cgp/coordinator/valid_triple.hpp"
#include "support/binomial_limit.hpp"
#include "support/errors.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;

TEST_CASE("Estimates is the rho-weighted mean of Fact 6.2", "[coordinator][triple]") {
  Estimates average;
  average.reset(3, 2);
  const double a[2] = {0, 10}, b[2] = {4, 10};
  average.add(1, a, 1.0);
  average.add(1, b, 3.0);
  CHECK(average.rho_bar[1] == 4.0);
  double mean[2];
  average.mean(1, mean);
  CHECK(mean[0] == 3);
  CHECK(mean[1] == 10);
  CHECK(average.rho_bar[0] == 0);  // other users untouched
  CHECK(average.rho_bar[2] == 0);
}

// Corollaries 6.1 and 6.2: after rounds 1..j of a doubling split, the estimate is within
// h = λ(d, β)/√(2ρ̄_j) with probability ≥ 1 − β. Over N trials the number of misses is
// Binomial(N, p ≤ β); we fail only above a limit a correct bound exceeds with probability
// ≤ 1e-8 (the exact binomial tail); 30 checks: ≤ 3e-7 per run.
TEST_CASE("valid triples: the confidence radius covers the truth with probability 1 - beta",
          "[coordinator][triple][statistical]") {
  CGP_SEEDED(6101);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  const double beta = 0.05;
  const int trials = 20000;
  const double rho = 1e-3;
  auto parts = *privacy::split_budget(rho, 6, privacy::SplitSchedule::doubling);
  for (std::size_t d : {1, 2, 5}) {
    std::vector<int> misses(parts.size(), 0);
    for (int trial = 0; trial < trials; ++trial) {
      std::vector<double> truth(d, 0.0);  // location; misses depend only on the noise
      Estimates average;
      average.reset(1, d);
      std::vector<double> release(d), mean(d);
      for (std::size_t j = 0; j < parts.size(); ++j) {
        double sigma = 1 / std::sqrt(2 * parts[j]);
        for (auto& v : release) v = sigma * normal(rng);
        average.add(0, release.data(), parts[j]);
        average.mean(0, mean.data());
        double error = 0;
        for (double m : mean) error += m * m;
        if (std::sqrt(error) > *confidence_radius(d, beta, average.rho_bar[0])) ++misses[j];
      }
    }
    const int limit = test::binomial_upper_limit(trials, beta, 1e-8);
    const int lower_limit = test::binomial_lower_limit(trials, beta, 1e-8);
    for (std::size_t j = 0; j < parts.size(); ++j) {
      INFO("d = " << d << " round " << j + 1 << " misses " << misses[j] << " limit " << limit);
      CHECK(misses[j] <= limit);
      // λ(2, β) is exact for d = 2, so the miss rate is β there: a bound that is far too
      // loose would also be a bug.
      if (d == 2) CHECK(misses[j] >= lower_limit);
    }
  }
}

TEST_CASE("confidence radius rejects bad parameters", "[coordinator][triple]") {
  CGP_REQUIRE_ERROR(confidence_radius(2, 0.05, 0), ErrorCode::not_positive, "total_rho");
  CGP_REQUIRE_ERROR(confidence_radius(2, 1.5, 1), ErrorCode::out_of_range, "beta");
  CGP_REQUIRE_ERROR(confidence_radius(0, 0.05, 1), ErrorCode::out_of_range, "dimension");
  CHECK(*confidence_radius(2, 0.05, 0.5) ==
        Approx(std::sqrt(2 * std::log(20.0)) * kRadiusSlack).epsilon(1e-12));
  // One formula: the elimination's radius from a λ computed once is the same number.
  const double lambda = *privacy::gaussian_norm_bound(2, 0.05);
  CHECK(radius_from_lambda(lambda, 0.37) == *confidence_radius(2, 0.05, 0.37));
}
