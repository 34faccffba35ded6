#include "cgp/common/privacy/selection.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "cgp/common/privacy/rounding.hpp"
#include "cgp/common/validate.hpp"
#include "normal_expectation.hpp"

namespace cgp::privacy {
namespace {

using detail::LogExpectation;
using detail::PhiFactor;

// Powers are doubles in the integrand; counts beyond 2^53 would round.
constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 50;

Error integration_failed() {
  return make_error(ErrorCode::internal_error, "quadrature",
                    "quadrature: the integral could not be bounded for these parameters");
}

// ε = log E(Δ) − log E(0) as an upper bound: the upper end of one minus the lower end of the
// other, rounded up; never below 0 (ε(0) = 0 and ε is non-decreasing in Δ).
template <class Factors>
Expected<double> log_ratio(Factors at_delta, Factors at_zero) {
  const LogExpectation top = detail::log_normal_expectation(at_delta, false);
  const LogExpectation bottom = detail::log_normal_expectation(at_zero, false);
  if (!top.ok || !bottom.ok) return integration_failed();
  return std::max(0.0, pad_up(top.upper - bottom.lower));
}

template <class Factors>
Expected<double> slope_of(Factors factors) {
  const LogExpectation e = detail::log_normal_expectation(factors, true);
  if (!e.ok) return integration_failed();
  return std::max(0.0, pad_up(e.slope_upper));
}

Status require_count(const char* name, std::uint64_t value, std::uint64_t lo) {
  if (value < lo || value > kMaxCount)
    return make_error(ErrorCode::out_of_range, name,
                      std::string(name) + " must lie in [" + std::to_string(lo) + ", 2^50], got " +
                          std::to_string(value));
  return {};
}

Status require_sensitivity(double sensitivity, double width) {
  CGP_RETURN_IF_ERROR(require_finite("sensitivity", sensitivity));
  if (!(sensitivity >= 0 && sensitivity <= width))
    return make_error(ErrorCode::out_of_range, "sensitivity",
                      "sensitivity must lie in [0, " + format_number(width) +
                          "] (the range's width), got " + format_number(sensitivity));
  return {};
}

// RNM: Φ(z − (c − 2Δ)/σ)^(d−1), ∂β/∂Δ = 2/σ.
std::array<PhiFactor, 1> rnm_factors(std::uint64_t d, double delta, double sigma, double c) {
  return {PhiFactor{static_cast<double>(d - 1), 1.0, -(c - 2 * delta) / sigma, 2 / sigma}};
}

// Above Threshold at its worst case (000 Lemma 18): silent queries at hi on D′, the alerting
// one at lo; on D each moves by Δ towards the other side.
PhiFactor silent_factor(const GaussianAboveThreshold& at, double power, double delta) {
  return {power, at.sigma_threshold / at.sigma_query,
          (at.threshold - at.range_hi + delta) / at.sigma_query, 1 / at.sigma_query};
}
PhiFactor alert_factor(const GaussianAboveThreshold& at, double delta) {
  return {1.0, -at.sigma_threshold / at.sigma_query,
          (at.range_lo - at.threshold + delta) / at.sigma_query, 1 / at.sigma_query};
}
std::array<PhiFactor, 2> alert_factors(const GaussianAboveThreshold& at, std::uint64_t t,
                                       double delta) {
  return {silent_factor(at, static_cast<double>(t - 1), delta), alert_factor(at, delta)};
}

}  // namespace

Expected<double> gaussian_rnm_epsilon(std::uint64_t candidates, double sensitivity, double sigma,
                                      double range_width) {
  CGP_RETURN_IF_ERROR(require_count("candidates", candidates, 2));
  CGP_RETURN_IF_ERROR(require_finite_positive("sigma", sigma));
  CGP_RETURN_IF_ERROR(require_finite_positive("range_width", range_width));
  CGP_RETURN_IF_ERROR(require_sensitivity(sensitivity, range_width));
  if (sensitivity == 0) return 0.0;
  return log_ratio(rnm_factors(candidates, sensitivity, sigma, range_width),
                   rnm_factors(candidates, 0, sigma, range_width));
}

Expected<double> gaussian_rnm_slope(std::uint64_t candidates, double sigma, double range_width) {
  CGP_RETURN_IF_ERROR(require_count("candidates", candidates, 2));
  CGP_RETURN_IF_ERROR(require_finite_positive("sigma", sigma));
  CGP_RETURN_IF_ERROR(require_finite_positive("range_width", range_width));
  return slope_of(rnm_factors(candidates, 0, sigma, range_width));
}

Status validate(const GaussianAboveThreshold& at) {
  CGP_RETURN_IF_ERROR(require_finite_positive("sigma_threshold", at.sigma_threshold));
  CGP_RETURN_IF_ERROR(require_finite_positive("sigma_query", at.sigma_query));
  CGP_RETURN_IF_ERROR(require_finite("range", at.range_lo));
  CGP_RETURN_IF_ERROR(require_finite("range", at.range_hi));
  if (!(at.range_lo < at.range_hi))
    return make_error(ErrorCode::out_of_range, "range",
                      "range: lo must be below hi, got [" + format_number(at.range_lo) + ", " +
                          format_number(at.range_hi) + "]");
  CGP_RETURN_IF_ERROR(require_finite("threshold", at.threshold));
  if (!(at.threshold >= at.range_lo && at.threshold <= at.range_hi))
    return make_error(ErrorCode::out_of_range, "threshold",
                      "threshold must lie in the range [" + format_number(at.range_lo) + ", " +
                          format_number(at.range_hi) + "], got " + format_number(at.threshold));
  return {};
}

Expected<double> gaussian_at_alert_epsilon(const GaussianAboveThreshold& at, std::uint64_t tick,
                                           double sensitivity) {
  CGP_RETURN_IF_ERROR(validate(at));
  CGP_RETURN_IF_ERROR(require_count("tick", tick, 1));
  CGP_RETURN_IF_ERROR(require_sensitivity(sensitivity, at.range_hi - at.range_lo));
  if (sensitivity == 0) return 0.0;
  return log_ratio(alert_factors(at, tick, sensitivity), alert_factors(at, tick, 0));
}

Expected<double> gaussian_at_silent_epsilon(const GaussianAboveThreshold& at, std::uint64_t ticks,
                                            double sensitivity) {
  CGP_RETURN_IF_ERROR(validate(at));
  CGP_RETURN_IF_ERROR(require_count("ticks", ticks, 1));
  CGP_RETURN_IF_ERROR(require_sensitivity(sensitivity, at.range_hi - at.range_lo));
  if (sensitivity == 0) return 0.0;
  const auto power = static_cast<double>(ticks);
  return log_ratio(std::array{silent_factor(at, power, sensitivity)},
                   std::array{silent_factor(at, power, 0)});
}

Expected<double> gaussian_at_alert_slope(const GaussianAboveThreshold& at, std::uint64_t tick) {
  CGP_RETURN_IF_ERROR(validate(at));
  CGP_RETURN_IF_ERROR(require_count("tick", tick, 1));
  return slope_of(alert_factors(at, tick, 0));
}

Expected<double> gaussian_at_silent_slope(const GaussianAboveThreshold& at, std::uint64_t ticks) {
  CGP_RETURN_IF_ERROR(validate(at));
  CGP_RETURN_IF_ERROR(require_count("ticks", ticks, 1));
  return slope_of(std::array{silent_factor(at, static_cast<double>(ticks), 0)});
}

Expected<double> gaussian_at_worst_slope(const GaussianAboveThreshold& at, std::uint64_t horizon) {
  CGP_RETURN_IF_ERROR(validate(at));
  // Two integrals a tick (about 0.1 ms each): a horizon past this is a caller's mistake, not a
  // computation to start.
  constexpr std::uint64_t kMaxHorizon = 1'000'000;
  if (horizon == 0 || horizon > kMaxHorizon)
    return make_error(ErrorCode::out_of_range, "horizon",
                      "horizon must lie in [1, 1000000], got " + std::to_string(horizon));
  double worst = 0;
  for (std::uint64_t t = 1; t <= horizon; ++t) {
    CGP_ASSIGN_OR_RETURN(double alert, slope_of(alert_factors(at, t, 0)));
    CGP_ASSIGN_OR_RETURN(double silent,
                         slope_of(std::array{silent_factor(at, static_cast<double>(t), 0)}));
    worst = std::max({worst, alert, silent});
  }
  return worst;
}

}  // namespace cgp::privacy
