#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "cgp/common/privacy/conversions.hpp"
#include "cgp/common/privacy/gaussian_profile.hpp"
#include "support/errors.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::privacy;

namespace {
// δ(ε) = ∫ max(0, p(x) − e^ε q(x)) dx for p = N(μ, 1), q = N(0, 1): the hockey-stick divergence
// by numerical integration, an oracle independent of the closed form.
double hockey_stick_integral(double mu, double epsilon) {
  const double lo = -12, hi = mu + 12, h = 1e-4;
  double sum = 0;
  for (double x = lo; x <= hi; x += h) {
    double p = std::exp(-0.5 * (x - mu) * (x - mu));
    double q = std::exp(-0.5 * x * x);
    sum += std::max(0.0, p - std::exp(epsilon) * q);
  }
  return sum * h / std::sqrt(2 * M_PI);
}
}  // namespace

TEST_CASE("log Phi matches 40-digit references across the whole line", "[privacy][profile]") {
  // Reference values: mpmath, 40 significant digits, log(ncdf(x)).
  struct Case {
    double x, log_cdf;
  };
  const Case cases[] = {
      {-40, -804.6084420137537881666068},  {-37.5, -707.6689893175071910661132},
      {-20, -203.9171553710972639368045},  {-10.0001, -53.23229496478863788468168},
      {-10, -53.23128515051247057834703},  {-9.9999, -53.23027534614184949370549},
      {-5, -15.0649983939887257360837},    {0, -0.6931471805599453094172321},
      {5, -2.866516129637635933845963e-7}, {10, -7.619853024160526070429306e-24},
  };
  for (const auto& c : cases) {
    INFO("x = " << c.x);
    CHECK(log_normal_cdf(c.x) == Approx(c.log_cdf).epsilon(1e-13));
  }
  CHECK(std::isfinite(log_normal_cdf(-1e5)));
  CHECK(log_normal_cdf(40) == 0.0);
}

TEST_CASE("Gaussian delta(eps) matches 60-digit references, including deep tails",
          "[privacy][profile]") {
  struct Case {
    double mu, eps, delta;
  };
  // mpmath, 60 digits: ncdf(mu/2 - eps/mu) - exp(eps) * ncdf(-mu/2 - eps/mu).
  const Case cases[] = {
      {1, 0, 0.38292492254802620728},          {1, 1, 0.1269367375066439458},
      {0.5, 0.2, 0.125448356710601532},        {2, 3, 0.18381307654447215597},
      {10, 60, 0.13683538039646126522},        {3, 30, 2.4309804317594551119e-18},
      {0.01, 0.001, 0.0035110920258420983293}, {40, 1000, 2.5362965149565508754e-7},
  };
  for (const auto& c : cases) {
    INFO("mu = " << c.mu << " eps = " << c.eps);
    CHECK(*gaussian_delta(c.mu, c.eps) == Approx(c.delta).epsilon(1e-9));
  }
}

TEST_CASE("Gaussian delta(eps) agrees with the hockey-stick integral", "[privacy][profile]") {
  CGP_SEEDED(7);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int trial = 0; trial < 12; ++trial) {
    double mu = 0.05 + 4 * unit(rng);
    double eps = 3 * unit(rng);
    INFO("mu = " << mu << " eps = " << eps);
    CHECK(*gaussian_delta(mu, eps) == Approx(hockey_stick_integral(mu, eps)).margin(1e-7));
  }
}

TEST_CASE("Gaussian eps(delta) is the tight inverse, as an upper bound", "[privacy][profile]") {
  for (double mu : {1e-3, 0.1, 1.0, 5.0, 30.0}) {
    for (double delta : {1e-12, 1e-6, 1e-3, 0.2}) {
      INFO("mu = " << mu << " delta = " << delta);
      double eps = *gaussian_epsilon(mu, delta);
      CHECK(eps >= 0);
      CHECK(*gaussian_delta(mu, eps) <= delta);
      if (eps > 0)
        CHECK(*gaussian_delta(mu, eps * (1 - 1e-7)) > delta);
      else
        CHECK(*gaussian_delta(mu, 0) <= delta);
    }
  }
  CGP_REQUIRE_ERROR(gaussian_epsilon(0, 1e-6), ErrorCode::not_positive, "mu");
  CGP_REQUIRE_ERROR(gaussian_epsilon(1, 0), ErrorCode::out_of_range, "delta");
  CGP_REQUIRE_ERROR(gaussian_delta(1, -1), ErrorCode::out_of_range, "epsilon");
  CGP_REQUIRE_ERROR(gaussian_delta(std::nan(""), 1), ErrorCode::not_finite, "mu");
}

TEST_CASE("per-unit eps of a Gaussian budget: a supremum over distances, below Lemma 3.2",
          "[privacy][profile]") {
  for (double rho : {1e-6, 1e-4, 1e-2, 1.0}) {
    for (double delta : {1e-10, 1e-6, 1e-3}) {
      for (double lambda : {0.1, 10.0, 1000.0}) {
        INFO("rho=" << rho << " delta=" << delta << " lambda=" << lambda);
        double eps = *gp_epsilon_from_gaussian_budget(rho, delta, lambda);
        double lemma = gp_epsilon_from_cgp(rho, delta, lambda)->epsilon;
        CHECK(eps <= lemma);
        // A supremum over t ≤ Λ: at least the value at Λ and at every grid point below it.
        double mu_unit = std::sqrt(2 * rho);
        for (double t = lambda; t > lambda * 1e-6; t /= 1.3) {
          CHECK(eps * t >= *gaussian_epsilon(t * mu_unit, delta) * (1 - 1e-12));
        }
        // And tight: not more than 1e-8 above the best value found on a fine grid.
        double best = 0;
        for (double t = lambda; t > lambda * 1e-3; t /= 1.01)
          best = std::max(best, *gaussian_epsilon(t * mu_unit, delta) / t);
        CHECK(eps <= best * (1 + 1e-8) + 1e-300);
      }
    }
  }
  CGP_REQUIRE_ERROR(gp_epsilon_from_gaussian_budget(-1, 1e-6, 1), ErrorCode::not_positive,
                    "budget");
  CGP_REQUIRE_ERROR(gp_epsilon_from_gaussian_budget(1, 1e-6, INFINITY), ErrorCode::not_finite,
                    "lambda");
}
