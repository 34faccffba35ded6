#include <sys/wait.h>
#include <unistd.h>

#include <boost/math/distributions/chi_squared.hpp>
#include <boost/multiprecision/cpp_int.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "cgp/client/privatizer.hpp"
#include "cgp/client/random.hpp"
#include "cgp/common/device_config.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "discrete_gaussian.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::client;

// Statistical thresholds. Each check fails a correct sampler with probability ≤ 1e-8
// (binomial and moment checks: |z| > 5.73, two-sided normal tail 1e-8; chi-square: the 1 − 1e-8
// quantile; Kolmogorov–Smirnov: √N·D > 3.09, asymptotic tail 2e^{-2·3.09²} ≈ 1e-8). This file
// makes fewer than 100 such checks, so a correct build fails it with probability < 1e-6.
namespace {
constexpr double kZ = 5.73;
constexpr double kKs = 3.09;

double chi_square_threshold(double degrees_of_freedom) {
  boost::math::chi_squared chi2(degrees_of_freedom);
  return boost::math::quantile(boost::math::complement(chi2, 1e-8));
}

double standard_normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0));
}
}  // namespace

TEST_CASE("Bernoulli(exp(-gamma)) has the right frequency", "[client][sampler][statistical]") {
  CGP_SEEDED(101);
  SimulationRandom source(seed, 0);
  RandomBits bits(source);
  const int n = 200000;
  struct Case {
    std::uint64_t num, den;
  };
  for (Case c : {Case{0, 1}, Case{3, 10}, Case{1, 1}, Case{5, 2}, Case{7, 3}, Case{1, 1000000}}) {
    double p = std::exp(-static_cast<double>(c.num) / static_cast<double>(c.den));
    int hits = 0;
    for (int i = 0; i < n; ++i) hits += bernoulli_exp(c.num, c.den, bits);
    INFO("gamma = " << c.num << "/" << c.den << " p = " << p << " hits = " << hits);
    CHECK(std::fabs(hits - n * p) <= kZ * std::sqrt(n * p * (1 - p)) + 1e-9);
  }
}

TEST_CASE("discrete Gaussian matches its pmf (chi-square), small sigma^2",
          "[client][sampler][statistical]") {
  CGP_SEEDED(102);
  SimulationRandom source(seed, 1);
  RandomBits bits(source);
  for (std::uint64_t sigma2 : {1ULL, 3ULL, 10ULL, 50ULL}) {
    auto gaussian = *DiscreteGaussian::create(sigma2);
    const int n = 100000;
    const int cut = static_cast<int>(std::ceil(3 * std::sqrt(static_cast<double>(sigma2))));
    // Exact pmf over the integers (the tail beyond ±60σ is below double precision).
    std::map<int, double> pmf;
    double z = 0;
    const int span = static_cast<int>(60 * std::sqrt(static_cast<double>(sigma2))) + 10;
    for (int x = -span; x <= span; ++x) z += std::exp(-0.5 * x * x / static_cast<double>(sigma2));
    std::vector<double> expected(2 * cut + 3, 0.0);  // bins: < −cut, −cut..cut, > cut
    auto bin_of = [&](long long x) -> std::size_t {
      if (x < -cut) return 0;
      if (x > cut) return expected.size() - 1;
      return static_cast<std::size_t>(x + cut + 1);
    };
    for (int x = -span; x <= span; ++x)
      expected[bin_of(x)] += n * std::exp(-0.5 * x * x / static_cast<double>(sigma2)) / z;
    std::vector<double> observed(expected.size(), 0.0);
    for (int i = 0; i < n; ++i)
      observed[bin_of(static_cast<long long>(gaussian.sample(bits)))] += 1;
    double chi2 = 0;
    for (std::size_t b = 0; b < expected.size(); ++b)
      chi2 += (observed[b] - expected[b]) * (observed[b] - expected[b]) / expected[b];
    double threshold = chi_square_threshold(static_cast<double>(expected.size() - 1));
    INFO("sigma2 = " << sigma2 << " chi2 = " << chi2 << " threshold = " << threshold);
    CHECK(chi2 <= threshold);
  }
}

TEST_CASE("released noise matches N(0, sigma^2) (Kolmogorov-Smirnov), sigma from 1e-3 to 1e6",
          "[client][sampler][statistical]") {
  CGP_SEEDED(103);
  SimulationRandom source(seed, 2);
  RandomBits bits(source);
  const int n = 20000;
  for (double sigma = 1e-3; sigma <= 1.0001e6; sigma *= 10) {
    double rho = 1 / (2 * sigma * sigma);
    auto plan = *plan_noise(1.0, rho, rho);
    CHECK(plan.sigma() >= sigma);                // never less noise than asked
    CHECK(plan.sigma() <= sigma * (1 + 1e-12));  // and essentially exactly that
    double phi[1] = {sigma * 0.37};              // an arbitrary value, not on the grid
    std::vector<double> out;
    std::vector<double> z(n);
    for (int i = 0; i < n; ++i) {
      REQUIRE(privatize(phi, plan, bits, out).ok());
      z[i] = (out[0] - phi[0]) / sigma;
    }
    std::sort(z.begin(), z.end());
    double d = 0;
    for (int i = 0; i < n; ++i) {
      double f = standard_normal_cdf(z[i]);
      d = std::max({d, f - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - f});
    }
    INFO("sigma = " << sigma << " sqrt(n)*D = " << std::sqrt(n) * d);
    CHECK(std::sqrt(static_cast<double>(n)) * d <= kKs);
  }
}

TEST_CASE("2-D releases have the right mean and covariance", "[client][sampler][statistical]") {
  CGP_SEEDED(104);
  SimulationRandom source(seed, 3);
  RandomBits bits(source);
  const int n = 40000;
  const double rho = 1e-4, sigma = 1 / std::sqrt(2 * rho);
  auto plan = *plan_noise(1.0, rho, 1.0);
  double x[2] = {1234.5, -987.25};
  std::vector<double> out;
  double sum[2] = {0, 0}, sum2[2] = {0, 0}, cross = 0;
  for (int i = 0; i < n; ++i) {
    REQUIRE(privatize(x, plan, bits, out).ok());
    double e0 = out[0] - x[0], e1 = out[1] - x[1];
    sum[0] += e0, sum[1] += e1, sum2[0] += e0 * e0, sum2[1] += e1 * e1, cross += e0 * e1;
  }
  for (int k = 0; k < 2; ++k) {
    INFO("coordinate " << k);
    CHECK(std::fabs(sum[k] / n) <= kZ * sigma / std::sqrt(n));
    // Var of the sample variance of a normal: 2σ⁴/n.
    CHECK(std::fabs(sum2[k] / n / (sigma * sigma) - 1) <= kZ * std::sqrt(2.0 / n) * 1.05);
  }
  CHECK(std::fabs(cross / n / (sigma * sigma)) <= kZ / std::sqrt(n) * 1.05);
}

// Whether s·2ρu² ≥ 1 (K = 1), exactly: ρ = mantissa·2^e and u = 2^grid_exponent, in arbitrary
// precision (long double is only a double on armhf, too coarse to tell S from S − 1).
namespace {
// x = mantissa·2^exponent exactly (x > 0 finite), as an arbitrary-precision pair.
void exact_double(double x, boost::multiprecision::cpp_int& mantissa, int& exponent) {
  int e;
  const double m = std::frexp(x, &e);
  mantissa = static_cast<std::int64_t>(std::ldexp(m, 53));
  exponent = e - 53;
}
// a·2^ea ≥ b·2^eb, exactly.
bool at_least(boost::multiprecision::cpp_int a, int ea, boost::multiprecision::cpp_int b, int eb) {
  if (ea >= eb)
    a <<= ea - eb;
  else
    b <<= eb - ea;
  return a >= b;
}
bool covers_exactly(double rho, int grid_exponent, std::uint64_t s) {
  boost::multiprecision::cpp_int mantissa;
  int exponent;
  exact_double(rho, mantissa, exponent);
  // s·2ρu² = s·mantissa·2^(exponent + 1 + 2g) ≥ 1 = 1·2^0.
  return at_least(s * mantissa, exponent + 1 + 2 * grid_exponent, 1, 0);
}
}  // namespace

TEST_CASE("noise plan: exact variance cover, charge, limits", "[client][privatizer]") {
  for (double rho : {1e-12, 3.7e-7, 1e-4, 0.5, 1.0, 2.0, 1e6}) {
    auto plan = *plan_noise(1.0, rho, rho);  // a release of the whole capacity
    INFO("rho = " << rho);
    // σ²_grid·u² ≥ 1/(2ρ) and σ²_grid − 1 would not be.
    CHECK(covers_exactly(rho, plan.grid_exponent, plan.sigma2_grid));
    CHECK_FALSE(covers_exactly(rho, plan.grid_exponent, plan.sigma2_grid - 1));
    const double u = plan.grid();
    CHECK(plan.sigma() / u >= std::ldexp(1.0, 24));
    CHECK(plan.sigma() / u < std::ldexp(1.0, 25) * (1 + 1e-12));
    CHECK(plan.charged_rho >= rho * (1 + 1.0 / 1024) * (1 + 1.0 / 1024));
    CHECK(plan.charged_rho <= rho * 1.002);
  }
  CHECK(plan_noise(1.0, 0, 1).error().code == ErrorCode::not_positive);
  CHECK(plan_noise(1.0, NAN, 1).error().parameter == "rho");
  CHECK(plan_noise(-1.0, 1, 1).error().parameter == "lipschitz");
  CHECK(plan_noise(1.0, 1, 0).error().parameter == "capacity");
}

TEST_CASE("noise plan: S is the least integer covering K^2/(2 rho u^2), exactly, at random",
          "[client][privatizer]") {
  // An independent exact check in arbitrary precision: S·2ρu² ≥ K² and (S − 1)·2ρu² < K², with
  // ρ = m·2^e and u = 2^g, K = 1 — over capacities 2^-100..2^100 and ρ from the minimum up.
  CGP_SEEDED(105);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_capacity(-100, 100), log_ratio(-18, 0);
  for (int i = 0; i < 3000; ++i) {
    const double capacity = std::exp2(log_capacity(rng));
    const double rho = std::max(min_rho(capacity), capacity * std::exp2(log_ratio(rng)));
    auto plan = plan_noise(1.0, rho, capacity);
    REQUIRE(plan.has_value());
    INFO("capacity = " << capacity << " rho = " << rho);
    CHECK(covers_exactly(rho, plan->grid_exponent, plan->sigma2_grid));
    CHECK_FALSE(covers_exactly(rho, plan->grid_exponent, plan->sigma2_grid - 1));
    CHECK(plan->sigma2_grid <= DiscreteGaussian::kMaxSigma2);
  }
}

namespace {
// plan_noise's documented plan, from its definition in arbitrary precision, for any K: the grid
// u = 2^g with g = min(e(σ) − 1 − 24, the largest g with u²·2·capacity·2^42 ≤ K²), σ = K/√(2ρ)
// in double (e(σ): σ ∈ [2^(e−1), 2^e)); S the least integer with S·2ρu² ≥ K². Only for
// inputs plan_noise accepts.
NoisePlan reference_plan(double lipschitz, double rho, double capacity) {
  using boost::multiprecision::cpp_int;
  cpp_int k, c, r;
  int ke, ce, re;
  exact_double(lipschitz, k, ke);
  exact_double(capacity, c, ce);
  exact_double(rho, r, re);
  int sigma_exponent;
  std::frexp(lipschitz / std::sqrt(2 * rho), &sigma_exponent);
  // K² ≥ c·2^(ce + 2g + 1 + 42): decreasing in g; start high and step down.
  int capacity_grid = 1100;
  while (!at_least(k * k, 2 * ke, c, ce + 2 * capacity_grid + 1 + 42)) --capacity_grid;
  NoisePlan plan;
  plan.grid_exponent = std::min(sigma_exponent - 1 - 24, capacity_grid);
  const int g = plan.grid_exponent;
  // S·r·2^(re + 2g + 1) ≥ K²: S = ⌈K²·2^(2ke) / (r·2^(re+2g+1))⌉.
  cpp_int numerator = k * k, denominator = r;
  const int shift = 2 * ke - (re + 2 * g + 1);
  if (shift >= 0)
    numerator <<= shift;
  else
    denominator <<= -shift;
  const cpp_int s = (numerator + denominator - 1) / denominator;
  plan.sigma2_grid = static_cast<std::uint64_t>(s);
  plan.charged_rho = privacy::device_charge(rho);
  plan.coordinate_limit = std::ldexp(1.0, g + 48);
  return plan;
}
}  // namespace

TEST_CASE("noise planner: one planner plans every rho as plan_noise and the exact definition",
          "[client][privatizer]") {
  // A planner does its (K, capacity) work once (the simulated fleet keeps one for thousands of
  // ρ a round): each of its plans must be plan_noise's, plan or error, for any K.
  CGP_SEEDED(107);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_capacity(-100, 100), log_ratio(-19, 1),
      log_lipschitz(-20, 20);
  int plans = 0, refusals = 0;
  for (int i = 0; i < 300; ++i) {
    const double capacity = i % 7 == 0 ? std::ldexp(1 + std::ldexp(1.0, -52), 2 * (i % 50) - 49)
                                       : std::exp2(log_capacity(rng));
    const double lipschitz = i % 3 == 0 ? 1.0 : i % 3 == 1 ? 2.0 : std::exp2(log_lipschitz(rng));
    auto planner = NoisePlanner::create(lipschitz, capacity);
    REQUIRE(planner.has_value());
    for (int j = 0; j < 20; ++j) {
      double rho = capacity * std::exp2(log_ratio(rng));
      if (j == 0) rho = min_rho(capacity);
      if (j == 1) rho = std::nextafter(min_rho(capacity), 0.0);
      if (j == 2) rho = capacity;
      INFO("K = " << lipschitz << " capacity = " << capacity << " rho = " << rho);
      const auto planned = planner->plan(rho);
      const auto direct = plan_noise(lipschitz, rho, capacity);
      REQUIRE(planned.has_value() == direct.has_value());
      if (!planned) {
        ++refusals;
        CHECK(planned.error().code == direct.error().code);
        CHECK(planned.error().parameter == direct.error().parameter);
        CHECK(planned.error().message == direct.error().message);
        // The only refusals in these ranges: below the minimum, or at it for a capacity an ulp
        // above an odd power of two (σ_cap just under a power of two puts σ²/u² a hair past
        // the sampler's 2^62 there: refused by name, on public values).
        CHECK(rho <= min_rho(capacity));
        continue;
      }
      ++plans;
      const NoisePlan expected = reference_plan(lipschitz, rho, capacity);
      for (const NoisePlan& plan : {*planned, *direct}) {
        CHECK(plan.grid_exponent == expected.grid_exponent);
        CHECK(plan.sigma2_grid == expected.sigma2_grid);
        CHECK(plan.charged_rho == expected.charged_rho);
        CHECK(plan.coordinate_limit == expected.coordinate_limit);
      }
    }
  }
  CHECK(plans > 5000);
  CHECK(refusals >= 300);  // every planner refused the ρ one ulp below its minimum
  // Bad K or capacity: the planner refuses by the same names as plan_noise.
  CHECK(NoisePlanner::create(0.0, 1.0).error().parameter == "lipschitz");
  CHECK(NoisePlanner::create(1.0, NAN).error().parameter == "capacity");
  CHECK(NoisePlanner::create(1.0, 1.0)->plan(-1.0).error().parameter == "rho");
}

TEST_CASE("device configs outside capacities 2^-100..2^100 are refused by name",
          "[client][privatizer]") {
  for (double budget : {1e31, 1e-31}) {
    auto config = cgp::DeviceConfig::cgp(budget);
    REQUIRE_FALSE(config.has_value());
    CHECK(config.error().code == ErrorCode::out_of_range);
    CHECK(config.error().parameter == "budget");
  }
  CHECK(cgp::DeviceConfig::cgp(1e30).has_value());
}

TEST_CASE("noise plan: the grid follows the capacity, so rounding slack cannot add up",
          "[client][privatizer]") {
  // With a grid relative to each release's σ alone, a tiny ρ had a coarse grid
  // and the rounding floors of many releases added up. Now u ≤ 2^-21·σ_cap for every ρ.
  for (double capacity : {1e-6, 1e-4, 1.0, 1e3}) {
    const double sigma_cap = 1 / std::sqrt(2 * capacity);
    for (double fraction : {1.0, 0.5, 1.0 / 64, 1e-3, std::ldexp(1.0, -18)}) {
      const double rho = capacity * fraction;
      INFO("capacity = " << capacity << " rho = " << rho);
      auto plan = plan_noise(1.0, rho, capacity);
      REQUIRE(plan.has_value());
      CHECK(plan->grid() <= sigma_cap * std::ldexp(1.0, -21));
      CHECK(plan->grid() <= plan->sigma() * std::ldexp(1.0, -24));
      CHECK(plan->sigma2_grid <= DiscreteGaussian::kMaxSigma2);
      CHECK(covers_exactly(rho, plan->grid_exponent, plan->sigma2_grid));
      CHECK_FALSE(covers_exactly(rho, plan->grid_exponent, plan->sigma2_grid - 1));
    }
    // Below capacity·2^-18: refused by name before any filter sees it (this bounds the number
    // of releases by 2^18 per capacity).
    auto below = plan_noise(1.0, std::nextafter(min_rho(capacity), 0.0), capacity);
    REQUIRE_FALSE(below.has_value());
    CHECK(below.error().code == ErrorCode::out_of_range);
    CHECK(below.error().parameter == "rho");
  }
  // Capacities one ulp above an odd power of two, where a double σ_cap rounds onto a power of
  // two: the grid bound u ≤ 2^-21·σ_cap is decided exactly (u²·2·capacity·2^42 ≤ K²).
  for (int e = -99; e <= 99; e += 2) {
    const double capacity = std::ldexp(1 + std::ldexp(1.0, -52), e);
    auto plan = plan_noise(1.0, capacity / 3, capacity);
    REQUIRE(plan.has_value());
    const long double u = plan->grid();
    INFO("capacity = 2^" << e << "(1 + 2^-52)");
    CHECK(u * u * 2 * static_cast<long double>(capacity) * 0x1p42L <= 1.0L);
  }
  // The resolution: 2^-11·s_d/√(2·capacity); 4.9 cm for a 2-D location at capacity 1e-4 per m².
  CHECK(resolution(1e-4, 2, 0) == Approx(std::sqrt(2.0) / 2048 / std::sqrt(2e-4)));
  CHECK(resolution(1e-4, 2, 0) < 0.05);
  CHECK(DiscreteGaussian::create(0).error().code == ErrorCode::out_of_range);
  CHECK(DiscreteGaussian::create(DiscreteGaussian::kMaxSigma2 + 1).error().parameter == "sigma2");
}

TEST_CASE("simulation randomness is reproducible per (seed, stream), secure is not seeded",
          "[client][random]") {
  SimulationRandom a(7, 1), b(7, 1), c(7, 2);
  std::uint64_t wa[8], wb[8], wc[8];
  a.fill(wa);
  b.fill(wb);
  c.fill(wc);
  CHECK(std::equal(std::begin(wa), std::end(wa), std::begin(wb)));
  CHECK_FALSE(std::equal(std::begin(wa), std::end(wa), std::begin(wc)));
  CHECK_FALSE(a.is_secure());
  auto secure = *SecureRandom::create();
  CHECK(secure->is_secure());
  std::uint64_t s1[4] = {}, s2[4] = {};
  secure->fill(s1);
  secure->fill(s2);
  CHECK_FALSE(std::equal(std::begin(s1), std::end(s1), std::begin(s2)));
  // After a fork the child reseeds: it never repeats the parent's stream.
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::uint64_t words[4];
    secure->fill(words);
    ssize_t written = write(fds[1], words, sizeof words);
    _exit(written == sizeof words ? 0 : 1);
  }
  std::uint64_t parent_words[4], child_words[4];
  secure->fill(parent_words);
  REQUIRE(read(fds[0], child_words, sizeof child_words) == sizeof child_words);
  waitpid(child, nullptr, 0);
  close(fds[0]);
  close(fds[1]);
  CHECK_FALSE(
      std::equal(std::begin(parent_words), std::end(parent_words), std::begin(child_words)));

  RandomBits bits(a);
  for (std::uint64_t bound : {1ULL, 2ULL, 3ULL, 1000ULL, (1ULL << 63) + 5})
    for (int i = 0; i < 100; ++i) CHECK(bits.uniform_below(bound) < bound);
  uint128 big = (static_cast<uint128>(1) << 100) + 12345;
  for (int i = 0; i < 100; ++i) CHECK(client::uniform_below(bits, big) < big);
}
