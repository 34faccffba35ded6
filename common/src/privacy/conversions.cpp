#include "cgp/common/privacy/conversions.hpp"

#include <cmath>

#include "cgp/common/privacy/rounding.hpp"
#include "cgp/common/validate.hpp"
#include "log_term.hpp"

namespace cgp::privacy {
namespace {

Status validate_cgp_to_gp(double rho, double delta, double lambda) {
  CGP_RETURN_IF_ERROR(require_finite_positive("rho", rho));
  CGP_RETURN_IF_ERROR(require_open_interval("delta", delta, 0.0, 1.0));
  return require_finite_positive("lambda", lambda);
}

// eq. (3) with s = 1 + t, written in t so that s close to 1 keeps its precision:
// s/(s−1) = (1+t)/t and log(2/((s+1)δ)) = −log1p(t/2) − log δ. Unrounded.
double eq3_first_term(double rho, double delta, double t) {
  double log_term = log_term_upper(delta, t);
  if (log_term <= 0) return 0.0;
  return (1 + t) / t * 2 * std::sqrt(rho * log_term);
}
double eq3_second_term(double rho, double lambda, double t) {
  return (1 + t) * rho * lambda;
}
double eq3(double rho, double delta, double lambda, double t) {
  return std::fmax(eq3_first_term(rho, delta, t), eq3_second_term(rho, lambda, t));
}

}  // namespace

Expected<double> cgp_rho_from_pure_gp(double epsilon) {
  CGP_RETURN_IF_ERROR(require_finite_positive("epsilon", epsilon));
  return pad_up(epsilon * epsilon / 2);
}

Expected<double> gp_epsilon_from_cgp_at(double rho, double delta, double lambda, double s) {
  CGP_RETURN_IF_ERROR(validate_cgp_to_gp(rho, delta, lambda));
  double s_max = 2 / delta - 1;
  if (!std::isfinite(s)) return require_finite("s", s).error();
  if (!(s > 1 && s <= s_max)) {
    return make_error(ErrorCode::out_of_range, "s",
                      "s must be in (1, 2/delta - 1] = (1, " + format_number(s_max) + "], got " +
                          format_number(s));
  }
  return pad_up(eq3(rho, delta, lambda, s - 1));
}

Expected<double> gp_epsilon_from_cgp_closed_form(double rho, double delta, double lambda) {
  CGP_RETURN_IF_ERROR(validate_cgp_to_gp(rho, delta, lambda));
  return pad_up(rho * lambda + 2 * std::sqrt(rho * -std::log(delta)));
}

Expected<GpEpsilon> gp_epsilon_from_cgp(double rho, double delta, double lambda) {
  CGP_RETURN_IF_ERROR(validate_cgp_to_gp(rho, delta, lambda));
  // The first term of eq. (3) falls and the second rises with s, so the max of the two is
  // smallest where they cross. Bisect on log t (t = s − 1 spans many orders of magnitude);
  // any s is a valid instance of Lemma 3.2, so imprecision here only costs tightness.
  // Just inside s = 2/δ − 1, where the first term reaches 0 and eq. (3) ends.
  double t_hi = (2 / delta - 2) * (1 - 1e-9);
  double t_lo = t_hi;
  while (t_lo > 1e-300 && eq3_first_term(rho, delta, t_lo) <= eq3_second_term(rho, lambda, t_lo))
    t_lo /= 16;
  for (int i = 0; i < 200 && t_hi > t_lo * (1 + 4 * DBL_EPSILON); ++i) {
    double mid = std::sqrt(t_lo * t_hi);
    if (eq3_first_term(rho, delta, mid) > eq3_second_term(rho, lambda, mid))
      t_lo = mid;
    else
      t_hi = mid;
  }
  GpEpsilon best{eq3(rho, delta, lambda, t_hi), 1 + t_hi};
  double at_lo = eq3(rho, delta, lambda, t_lo);
  if (at_lo < best.epsilon) best = {at_lo, 1 + t_lo};
  // The end of the domain, s = 2/δ − 1, where the logarithm is 0: ε = sρΛ. Eq. (3) holds for
  // every s below it and the set of valid ε is closed, so the limit is valid too; it is the
  // optimum when ρΛ is small against √ρ (see conversions.md).
  double at_end = (2 / delta - 1) * rho * lambda;
  if (at_end < best.epsilon) best = {at_end, 2 / delta - 1};
  // The closed-form s is also a candidate, so the result is never worse than it.
  double t_closed = 2 * std::sqrt(rho * -std::log(delta)) / (rho * lambda);
  if (t_closed > 0 && t_closed <= 2 / delta - 2) {
    double at_closed = eq3(rho, delta, lambda, t_closed);
    if (at_closed < best.epsilon) best = {at_closed, 1 + t_closed};
  }
  best.epsilon = pad_up(best.epsilon);
  return best;
}

}  // namespace cgp::privacy
