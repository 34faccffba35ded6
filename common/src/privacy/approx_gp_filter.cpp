#include "cgp/common/privacy/approx_gp_filter.hpp"

#include <cmath>

#include "cgp/common/privacy/rounding.hpp"
#include "cgp/common/validate.hpp"
#include "log_term.hpp"

namespace cgp::privacy {
namespace {

// For a fixed s = 1 + t, max(g_δ(s)√R, sΛR) ≤ B iff R ≤ min(B²/g_δ(s)², B/(sΛ)).
// The first bound rises with t, the second falls. Unrounded.
double capacity_from_g(double budget, double delta, double t) {
  double log_term = log_term_upper(delta, t);
  if (log_term <= 0) return INFINITY;
  double g = (1 + t) / t * 2 * std::sqrt(log_term);
  return budget * budget / (g * g);
}
double capacity_from_lambda(double budget, double lambda, double t) {
  return budget / ((1 + t) * lambda);
}
double capacity_at(double budget, double delta, double lambda, double t) {
  return std::fmin(capacity_from_g(budget, delta, t), capacity_from_lambda(budget, lambda, t));
}

}  // namespace

Expected<double> approx_gp_capacity(double budget_epsilon, double delta, double lambda) {
  CGP_RETURN_IF_ERROR(require_finite_positive("budget", budget_epsilon));
  CGP_RETURN_IF_ERROR(require_open_interval("delta", delta, 0.0, 1.0));
  CGP_RETURN_IF_ERROR(require_finite_positive("lambda", lambda));
  // Every t gives a valid R ≤ R*; bisect for the crossing to make it tight.
  // Just inside s = 2/δ − 1, where g_δ reaches 0 and eq. (10) ends.
  double t_hi = (2 / delta - 2) * (1 - 1e-9);
  double t_lo = t_hi;
  while (t_lo > 1e-300 && capacity_from_g(budget_epsilon, delta, t_lo) >=
                              capacity_from_lambda(budget_epsilon, lambda, t_lo))
    t_lo /= 16;
  for (int i = 0; i < 200 && t_hi > t_lo * (1 + 4 * DBL_EPSILON); ++i) {
    double mid = std::sqrt(t_lo * t_hi);
    if (capacity_from_g(budget_epsilon, delta, mid) <
        capacity_from_lambda(budget_epsilon, lambda, mid))
      t_lo = mid;
    else
      t_hi = mid;
  }
  double best = std::fmax(capacity_at(budget_epsilon, delta, lambda, t_lo),
                          capacity_at(budget_epsilon, delta, lambda, t_hi));
  // The limit s → 2/δ − 1, where g_δ(s) → 0 and only sΛR ≤ B binds (valid as a limit of
  // valid s; see approx_gp_filter.md).
  best = std::fmax(best, budget_epsilon / ((2 / delta - 1) * lambda));
  return pad_down(best);
}

bool approx_gp_filter_continues(double sum_rho, double budget_epsilon, double delta,
                                double lambda) {
  if (!(sum_rho >= 0) || !std::isfinite(sum_rho)) return false;
  auto capacity = approx_gp_capacity(budget_epsilon, delta, lambda);
  return capacity && sum_rho <= *capacity;
}

}  // namespace cgp::privacy
