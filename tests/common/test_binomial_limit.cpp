// The tests' binomial limits (support/binomial_limit.hpp) against tails summed term by term.
#include <catch2/catch.hpp>
#include <cmath>

#include "support/binomial_limit.hpp"

namespace {

// P[Binomial(n, p) = i], from log-gamma: an independent way to the same tail.
double binomial_pmf(int n, double p, int i) {
  return std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) +
                  i * std::log(p) + (n - i) * std::log1p(-p));
}
double upper_tail(int n, double p, int m) {  // P[X > m]
  double tail = 0;
  for (int i = n; i > m; --i) tail += binomial_pmf(n, p, i);
  return tail;
}
double lower_tail(int n, double p, int m) {  // P[X < m]
  double tail = 0;
  for (int i = 0; i < m; ++i) tail += binomial_pmf(n, p, i);
  return tail;
}

}  // namespace

TEST_CASE("binomial limits are the exact tail quantiles", "[test_support][statistical]") {
  struct Case {
    int trials;
    double p;
    int upper;  // summed in Python over exact terms, as below
  };
  for (Case c : {Case{60, 0.05, 16}, Case{100, 0.05, 21}, Case{200, 0.05, 31}, Case{400, 0.05, 49},
                 Case{20000, 0.05, 1177}}) {
    INFO("trials = " << c.trials << ", p = " << c.p);
    const int upper = cgp::test::binomial_upper_limit(c.trials, c.p, 1e-8);
    CHECK(upper == c.upper);
    CHECK(upper_tail(c.trials, c.p, upper) <= 1e-8);
    CHECK(upper_tail(c.trials, c.p, upper - 1) > 1e-8);
    const int lower = cgp::test::binomial_lower_limit(c.trials, c.p, 1e-8);
    CHECK(lower_tail(c.trials, c.p, lower) <= 1e-8);
    CHECK(lower_tail(c.trials, c.p, lower + 1) > 1e-8);
  }
  // The normal approximation these limits replace: R·p + 5.73·σ understates the tail at small R·p.
  const double normal = 60 * 0.05 + 5.73 * std::sqrt(60 * 0.05 * 0.95);
  CHECK(upper_tail(60, 0.05, static_cast<int>(normal)) > 1e-6);
  // Edges: a sure failure and a failure that never happens.
  CHECK(cgp::test::binomial_upper_limit(10, 1.0, 1e-8) == 10);
  CHECK(cgp::test::binomial_upper_limit(10, 0.0, 1e-8) == 0);
  CHECK(cgp::test::binomial_lower_limit(10, 1.0, 1e-8) == 10);
  CHECK(cgp::test::binomial_lower_limit(10, 0.0, 1e-8) == 0);
}
