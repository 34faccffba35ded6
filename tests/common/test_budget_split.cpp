#include <bit>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <random>

#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/rounding.hpp"
#include "support/errors.hpp"
#include "support/seed.hpp"

using namespace cgp;
using namespace cgp::privacy;

namespace {
long double exact_sum(const std::vector<double>& parts) {
  long double sum = 0;  // 64-bit mantissa: exact enough to see a one-ulp overspend of a double
  for (double p : parts) sum += p;
  return sum;
}
double naive_sum(const std::vector<double>& parts) {
  double sum = 0;
  for (double p : parts) sum += p;
  return sum;
}
}  // namespace

TEST_CASE("split schedules never sum to more than the total, c = 1..64 and beyond",
          "[privacy][split]") {
  CGP_SEEDED(64);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> exponent(-12, 3);
  for (auto schedule : {SplitSchedule::even, SplitSchedule::doubling}) {
    for (std::size_t c = 1; c <= kMaxRounds; c += (c < 64 ? 1 : 16)) {
      for (int trial = 0; trial < 40; ++trial) {
        double rho = trial == 0 ? 1.0 : std::pow(10.0, exponent(rng)) * (1 + 1e-3 * trial);
        INFO("schedule " << split_schedule_name(schedule) << " c=" << c << " rho=" << rho);
        auto parts = *split_budget(rho, c, schedule);
        REQUIRE(parts.size() == c);
        CHECK(naive_sum(parts) <= rho);
        CHECK(exact_sum(parts) <= static_cast<long double>(rho));
        for (double p : parts) CHECK(p > 0);
        // And nearly nothing is lost to the rounding repair.
        CHECK(naive_sum(parts) >= rho * (1 - 1e-12));
      }
    }
  }
}

TEST_CASE("split schedules have the paper's shape", "[privacy][split]") {
  auto even = *split_budget(1.0, 4, SplitSchedule::even);
  for (double p : even) CHECK(p == Approx(0.25).epsilon(1e-15));
  auto doubling = *split_budget(1.0, 4, SplitSchedule::doubling);
  // 2^{j−1}/(2^c − 1): 1/15, 2/15, 4/15, 8/15
  CHECK(doubling[0] == Approx(1.0 / 15).epsilon(1e-15));
  CHECK(doubling[3] == Approx(8.0 / 15).epsilon(1e-15));
  auto sixty_four = *split_budget(2.0, 64, SplitSchedule::doubling);
  for (std::size_t j = 1; j < 64; ++j)
    CHECK(sixty_four[j] / sixty_four[j - 1] == Approx(2.0).epsilon(1e-12));
  CHECK(sixty_four[63] == Approx(1.0).epsilon(1e-12));
}

TEST_CASE("split_budget rejects bad parameters", "[privacy][split]") {
  CGP_REQUIRE_ERROR(split_budget(1, 0, SplitSchedule::even), ErrorCode::out_of_range, "c");
  CGP_REQUIRE_ERROR(split_budget(1, kMaxRounds + 1, SplitSchedule::even), ErrorCode::out_of_range,
                    "c");
  CGP_REQUIRE_ERROR(split_budget(0, 4, SplitSchedule::even), ErrorCode::not_positive, "rho");
  CGP_REQUIRE_ERROR(split_budget(-1, 4, SplitSchedule::doubling), ErrorCode::not_positive, "rho");
  CGP_REQUIRE_ERROR(split_budget(std::nan(""), 4, SplitSchedule::even), ErrorCode::not_finite,
                    "rho");
  // So small that the first doubling part underflows to zero.
  CGP_REQUIRE_ERROR(split_budget(1e-300, 256, SplitSchedule::doubling), ErrorCode::out_of_range,
                    "rho");
  CHECK(*parse_split_schedule("even") == SplitSchedule::even);
  CHECK(*parse_split_schedule("double") == SplitSchedule::doubling);
  CHECK(*parse_split_schedule("doubling") == SplitSchedule::doubling);
  CGP_REQUIRE_ERROR(parse_split_schedule("halving"), ErrorCode::invalid_argument, "split");
}

TEST_CASE("device charge and its inverse", "[privacy][charge]") {
  for (double charge : {1e-12, 3e-7, 1e-4, 0.5, 1.0, 17.0, 1e6}) {
    INFO("charge = " << charge);
    double rho = privacy::rho_within_charge(charge);
    CHECK(privacy::device_charge(rho) <= charge);
    CHECK(rho >= charge / 1.002);
    CHECK(privacy::device_charge(rho * (1 + 1e-12)) > charge);
    CHECK(privacy::device_charge(charge) >= charge * (1 + 1.0 / 512));
  }
}

// rho_within_charge bisects on bit patterns; its definition is the step-down loop below (the
// largest ρ ≤ charge/(1 + 2^-10)² that device_charge keeps within the charge, or 0).
TEST_CASE("rho_within_charge is the largest rho within the charge", "[privacy][charge]") {
  CGP_SEEDED(78);
  std::mt19937_64 rng(seed);
  const auto by_steps = [](double charge) {
    double rho = charge / ((1 + privacy::kGridSlack) * (1 + privacy::kGridSlack));
    while (rho > 0 && privacy::device_charge(rho) > charge) rho = std::nextafter(rho, 0.0);
    return rho;
  };
  std::vector<double> charges = {5e-324, 1e-320, DBL_MIN, 1.0, 1e-6, DBL_MAX / 2};
  for (int i = 0; i < 100000; ++i)
    charges.push_back(
        std::ldexp(static_cast<double>(rng() >> 11), static_cast<int>(rng() % 2100) - 1100));
  for (double charge : charges) {
    INFO("charge = " << charge);
    CHECK(privacy::rho_within_charge(charge) == by_steps(charge));
  }
}

TEST_CASE("next_up and subtract_down round the right way", "[privacy][rounding]") {
  CGP_SEEDED(77);
  std::mt19937_64 rng(seed);
  std::vector<double> values{0.0,   -0.0,    5e-324, 1e-310,  1.0,      0.1,
                             1e300, DBL_MAX, -1.0,   -5e-324, INFINITY, -INFINITY};
  for (int i = 0; i < 1000; ++i)
    values.push_back(
        std::ldexp(static_cast<double>(rng() >> 11), static_cast<int>(rng() % 200) - 100));
  for (int i = 0; i < 1000; ++i) values.push_back(-values[static_cast<std::size_t>(i) + 12]);
  for (double edge : {-DBL_MAX, DBL_MIN, -DBL_MIN, std::nextafter(DBL_MIN, 0.0), 2.0, -2.0,
                      std::nextafter(-5e-324, 0.0)})
    values.push_back(edge);
  // Bit for bit (−0 and +0 apart): the branch-free steps are std::nextafter's.
  const auto bits = [](double v) { return std::bit_cast<std::uint64_t>(v); };
  for (double x : values) {
    INFO("x = " << x);
    CHECK(bits(privacy::next_up(x)) == bits(std::nextafter(x, INFINITY)));
    CHECK(bits(privacy::next_down(x)) == bits(std::nextafter(x, -INFINITY)));
  }
  CHECK(std::isnan(privacy::next_up(NAN)));
  CHECK(std::isnan(privacy::next_down(NAN)));
  for (int i = 0; i < 1000; ++i) {
    double a = std::ldexp(static_cast<double>(rng() >> 11), -40),
           b = a * (static_cast<double>(rng() % 1000) / 1000.0);
    double d = privacy::subtract_down(a, b);
    // d ≤ a − b exactly: d + b ≤ a, checked in long double (exact for these magnitudes).
    CHECK(static_cast<long double>(d) + static_cast<long double>(b) <= static_cast<long double>(a));
    CHECK(d >= (a - b) - std::fabs(a - b) * 1e-15);
  }
}
