#include "cgp/common/privacy/gaussian_profile.hpp"

#include <cmath>
#include <numbers>
#include <queue>
#include <vector>

#include "cgp/common/privacy/rounding.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::privacy {
namespace {

// log of Mills' ratio R(z) = Φ(−z)/φ(z) for z ≥ 10 by its continued fraction
// R(z) = 1/(z + 1/(z + 2/(z + 3/(z + ...)))), evaluated bottom-up; 60 levels reach full double
// precision for z ≥ 10.
double log_mills_ratio(double z) {
  double tail = z;
  for (int k = 60; k >= 1; --k) tail = z + k / tail;
  return -std::log(tail);
}

// Relative accuracy we require of δ(ε) before trusting "δ(ε) ≤ δ": log Φ and the e^ε product
// are accurate to ~1e-14 relative; 1e-9 leaves a wide margin.
constexpr double kDeltaSafety = 1e-9;

double delta_unchecked(double mu, double epsilon) {
  double a = mu / 2 - epsilon / mu;
  double b = -mu / 2 - epsilon / mu;
  double log_first = log_normal_cdf(a);
  double log_second = epsilon + log_normal_cdf(b);
  if (!(log_second < log_first)) return 0.0;  // equal in exact arithmetic only at μ = 0
  return std::exp(log_first) * -std::expm1(log_second - log_first);
}

bool delta_at_most(double mu, double epsilon, double delta) {
  return delta_unchecked(mu, epsilon) * (1 + kDeltaSafety) <= delta;
}

// Smallest ε ≥ 0 with δ(ε) ≤ δ, as an upper bound. Arguments already validated.
double epsilon_upper(double mu, double delta) {
  if (delta_at_most(mu, 0.0, delta)) return 0.0;
  // The zCDP conversion ε = ρ' + 2√(ρ' log(1/δ)) with ρ' = μ²/2 is a valid ε for this δ,
  // so the root lies below it; widen if rounding says otherwise.
  double rho_equiv = mu * mu / 2;
  double hi = rho_equiv + 2 * std::sqrt(rho_equiv * -std::log(delta)) + 1e-300;
  while (!delta_at_most(mu, hi, delta) && hi < 1e300) hi *= 2;
  double lo = 0.0;
  for (int i = 0; i < 200 && hi - lo > hi * 4 * DBL_EPSILON; ++i) {
    double mid = lo + (hi - lo) / 2;
    if (delta_at_most(mu, mid, delta))
      hi = mid;
    else
      lo = mid;
  }
  return pad_up(hi);
}

}  // namespace

double log_normal_cdf(double x) noexcept {
  if (std::isnan(x)) return x;
  if (x > 0) return std::log1p(-0.5 * std::erfc(x / std::numbers::sqrt2));
  if (x > -10) return std::log(0.5 * std::erfc(-x / std::numbers::sqrt2));
  // Φ(x) = φ(−x)·R(−x), with log φ(z) = −z²/2 − log √(2π).
  double z = -x;
  return -0.5 * z * z - 0.5 * std::log(2 * std::numbers::pi) + log_mills_ratio(z);
}

Expected<double> gaussian_delta(double mu, double epsilon) {
  CGP_RETURN_IF_ERROR(require_finite_positive("mu", mu));
  CGP_RETURN_IF_ERROR(require_finite("epsilon", epsilon));
  if (epsilon < 0) {
    return make_error(ErrorCode::out_of_range, "epsilon",
                      "epsilon must be >= 0, got " + format_number(epsilon));
  }
  return delta_unchecked(mu, epsilon);
}

Expected<double> gaussian_epsilon(double mu, double delta) {
  CGP_RETURN_IF_ERROR(require_finite_positive("mu", mu));
  CGP_RETURN_IF_ERROR(require_open_interval("delta", delta, 0.0, 1.0));
  return epsilon_upper(mu, delta);
}

Expected<double> gp_epsilon_from_gaussian_budget(double budget_rho, double delta, double lambda) {
  CGP_RETURN_IF_ERROR(require_finite_positive("budget", budget_rho));
  CGP_RETURN_IF_ERROR(require_open_interval("delta", delta, 0.0, 1.0));
  CGP_RETURN_IF_ERROR(require_finite_positive("lambda", lambda));

  const double mu_per_unit = std::sqrt(2 * budget_rho);
  auto eps_at = [&](double t) { return epsilon_upper(t * mu_per_unit, delta); };

  // ε_t(δ) is non-decreasing in t (a larger μ is a less private Gaussian), so on [a, b]
  // sup ε_t/t ≤ ε_b/a. Branch and bound over a geometric grid: the answer is the largest such
  // bound over the leaves, which is ≥ the true supremum at every step; refine the leaf with the
  // largest bound until it is within 1e-9 of the best point value ε_t/t seen.
  struct Interval {
    double a, b, eps_b, bound;
    bool operator<(const Interval& other) const { return bound < other.bound; }
  };
  std::priority_queue<Interval> leaves;
  double best_point = 0;
  double b = lambda;
  double eps_b = eps_at(b);
  best_point = eps_b / b;
  // Walk down by halving until ε vanishes (δ(0) ≤ δ): below that every ratio is 0.
  while (eps_b > 0) {
    double a = b / 2;
    double eps_a = eps_at(a);
    leaves.push({a, b, eps_b, eps_b / a});
    if (eps_a > 0) best_point = std::fmax(best_point, eps_a / a);
    b = a;
    eps_b = eps_a;
  }
  for (int iteration = 0; iteration < 20000 && !leaves.empty(); ++iteration) {
    Interval top = leaves.top();
    if (top.bound <= best_point * (1 + 1e-9)) break;
    leaves.pop();
    double mid = std::sqrt(top.a * top.b);
    double eps_mid = eps_at(mid);
    best_point = std::fmax(best_point, eps_mid / mid);
    leaves.push({top.a, mid, eps_mid, eps_mid / top.a});
    leaves.push({mid, top.b, top.eps_b, top.eps_b / mid});
  }
  double answer = leaves.empty() ? best_point : std::fmax(best_point, leaves.top().bound);
  return pad_up(answer);
}

}  // namespace cgp::privacy
