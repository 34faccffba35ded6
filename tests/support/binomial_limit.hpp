// Limits for tests that count failures over repeated trials: a correct implementation fails each
// trial with probability p at most, so its failures are stochastically below Binomial(trials, p),
// and a test that fails above binomial_upper_limit(trials, p, rate) fails it with probability at
// most `rate`, exactly.
//
// Why not trials·p + z·σ: the normal approximation understates a binomial's upper tail when
// trials·p is small. At 60 trials and p = 0.05, trials·p + 5.73·σ (the normal 1e-8 point) is
// exceeded with probability 6.8e-6; at 400 trials, 4.6e-7.
#pragma once

#include <algorithm>
#include <boost/math/distributions/binomial.hpp>

namespace cgp::test {

// The least m with P[Binomial(trials, p) > m] ≤ rate (trials ≥ 1, 0 ≤ p ≤ 1, 0 < rate ≤ 0.1).
// The tail shrinks away from the mean, and a rate ≤ 0.1 puts m above it: the walk starts there.
inline int binomial_upper_limit(int trials, double p, double rate) {
  const boost::math::binomial_distribution<double> failures(trials, p);
  int m = static_cast<int>(trials * p);
  while (m < trials && boost::math::cdf(boost::math::complement(failures, m)) > rate) ++m;
  return m;
}

// The greatest m with P[Binomial(trials, p) < m] ≤ rate: a bound far too loose (misses well
// below the promised rate) fails below it. The same preconditions; the walk starts above the mean.
inline int binomial_lower_limit(int trials, double p, double rate) {
  const boost::math::binomial_distribution<double> failures(trials, p);
  int m = std::min(trials, static_cast<int>(trials * p) + 1);
  while (m > 0 && boost::math::cdf(failures, m - 1) > rate) --m;
  return m;
}

}  // namespace cgp::test
