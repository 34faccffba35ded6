#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/privacy/confidence.hpp"
#include "cgp/coordinator/valid_triple.hpp"
#include "support/errors.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::coordinator;

TEST_CASE("ReleaseAverage is the rho-weighted mean of Fact 6.2", "[coordinator][triple]") {
  ReleaseAverage average(2);
  CHECK(average.mean().empty());
  std::vector<double> a{0, 10}, b{4, 10};
  REQUIRE(average.add(a, 1.0).ok());
  REQUIRE(average.add(b, 3.0).ok());
  CHECK(average.rounds() == 2);
  CHECK(average.total_rho() == 4.0);
  CHECK(average.mean() == std::vector<double>{3, 10});
  std::vector<double> wrong{1, 2, 3}, bad{NAN, 1};
  CHECK(average.add(wrong, 1).error().code == ErrorCode::dimension_mismatch);
  CHECK(average.add(bad, 1).error().parameter == "values[0]");
  CHECK(average.add(a, 0).error().code == ErrorCode::not_positive);
  CHECK(average.rounds() == 2);  // failed adds change nothing
}

// Corollaries 6.1 and 6.2: after rounds 1..j of a doubling split, the estimate is within
// h = λ(d, β)/√(2ρ̄_j) with probability ≥ 1 − β. Over N trials the number of misses is
// Binomial(N, p ≤ β); we fail only above Nβ + 5.73·√(Nβ(1−β)), which a correct bound exceeds
// with probability < 1e-8 (normal approximation, N·β ≥ 500); 30 checks: < 3e-7 per run.
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
      ReleaseAverage average(d);
      std::vector<double> release(d);
      for (std::size_t j = 0; j < parts.size(); ++j) {
        double sigma = 1 / std::sqrt(2 * parts[j]);
        for (auto& v : release) v = sigma * normal(rng);
        REQUIRE(average.add(release, parts[j]).ok());
        auto mean = average.mean();
        double error = 0;
        for (double m : mean) error += m * m;
        if (std::sqrt(error) > *confidence_radius(d, beta, average.total_rho())) ++misses[j];
      }
    }
    double limit = trials * beta + 5.73 * std::sqrt(trials * beta * (1 - beta));
    for (std::size_t j = 0; j < parts.size(); ++j) {
      INFO("d = " << d << " round " << j + 1 << " misses " << misses[j] << " limit " << limit);
      CHECK(misses[j] <= limit);
      // λ(2, β) is exact for d = 2, so the miss rate is β there: a bound that is far too
      // loose would also be a bug.
      if (d == 2) CHECK(misses[j] >= trials * beta - 5.73 * std::sqrt(trials * beta * (1 - beta)));
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
