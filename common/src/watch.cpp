#include "cgp/common/watch.hpp"

#include <algorithm>
#include <cmath>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/rounding.hpp"
#include "cgp/common/validate.hpp"
#include "cgp/common/wire/limits.hpp"

namespace cgp {

std::string_view watch_noise_name(WatchNoise noise) noexcept {
  switch (noise) {
    case WatchNoise::laplace:
      return "laplace";
    case WatchNoise::gaussian_expost:
      return "gaussian_expost";
  }
  return "unknown";
}

std::string_view watch_trigger_name(WatchTrigger trigger) noexcept {
  switch (trigger) {
    case WatchTrigger::at_or_below:
      return "at_or_below";
    case WatchTrigger::at_or_above:
      return "at_or_above";
  }
  return "unknown";
}

std::string_view watch_tick_status_name(WatchTickStatus status) noexcept {
  switch (status) {
    case WatchTickStatus::silent:
      return "silent";
    case WatchTickStatus::alert:
      return "alert";
    case WatchTickStatus::finished:
      return "finished";
    case WatchTickStatus::budget_exhausted:
      return "budget_exhausted";
  }
  return "unknown";
}

namespace {

Status require_id(std::string_view parameter, const std::string& value) {
  if (value.empty())
    return make_error(ErrorCode::missing_field, parameter,
                      std::string(parameter) + " must not be empty");
  if (value.size() > wire::kMaxIdBytes)
    return make_error(ErrorCode::too_large, parameter,
                      std::string(parameter) + " has " + std::to_string(value.size()) +
                          " bytes, over the limit of " + std::to_string(wire::kMaxIdBytes));
  return {};
}

// Scores are distances: clamping them beyond ±2^31 would only let the grid overflow.
constexpr double kMaxClamp = 0x1p31;

Status require_clamp(std::string_view parameter, double value) {
  CGP_RETURN_IF_ERROR(require_finite(parameter, value));
  if (!(std::fabs(value) <= kMaxClamp))
    return make_error(
        ErrorCode::out_of_range, parameter,
        std::string(parameter) + " must lie in [-2^31, 2^31], got " + format_number(value));
  return {};
}

}  // namespace

Expected<WatchSpec> WatchSpec::create(WatchSpecParams p) {
  CGP_RETURN_IF_ERROR(require_id("watch_id", p.watch_id));
  CGP_RETURN_IF_ERROR(require_id("component_id", p.component_id));
  switch (p.statistic) {
    case StatisticKind::distance_to_point:
      if (p.point.empty())
        return make_error(ErrorCode::missing_field, "point",
                          "point must have at least 1 coordinate");
      if (p.point.size() > wire::kMaxDimension)
        return make_error(ErrorCode::too_large, "point",
                          "point has dimension " + std::to_string(p.point.size()) +
                              ", over the limit of " + std::to_string(wire::kMaxDimension));
      CGP_RETURN_IF_ERROR(geometry::require_public_coordinates("point", p.point));
      p.region.reset();
      break;
    case StatisticKind::signed_distance_to_region:
      if (!p.region)
        return make_error(ErrorCode::missing_field, "region",
                          "region is missing for a signed_distance_to_region score");
      p.point.clear();
      break;
    case StatisticKind::location:
      return make_error(ErrorCode::invalid_argument, "statistic",
                        "a watch's score must be distance_to_point or "
                        "signed_distance_to_region, got location");
  }
  CGP_RETURN_IF_ERROR(require_clamp("clamp_lo", p.clamp_lo));
  CGP_RETURN_IF_ERROR(require_clamp("clamp_hi", p.clamp_hi));
  if (!(p.clamp_lo < p.clamp_hi))
    return make_error(ErrorCode::out_of_range, "clamp_hi",
                      "clamp_hi must be greater than clamp_lo = " + format_number(p.clamp_lo) +
                          ", got " + format_number(p.clamp_hi));
  CGP_RETURN_IF_ERROR(require_finite("threshold", p.threshold));
  if (!(p.threshold >= p.clamp_lo && p.threshold <= p.clamp_hi))
    return make_error(ErrorCode::out_of_range, "threshold",
                      "threshold must lie in the clamp range [" + format_number(p.clamp_lo) + ", " +
                          format_number(p.clamp_hi) + "], got " + format_number(p.threshold));
  if (p.trigger != WatchTrigger::at_or_below && p.trigger != WatchTrigger::at_or_above)
    return make_error(ErrorCode::invalid_argument, "trigger", "trigger is not a known value");
  const std::uint64_t max_horizon =
      p.noise == WatchNoise::gaussian_expost ? kMaxGaussianWatchHorizon : kMaxWatchHorizon;
  if (p.horizon < 1 || p.horizon > max_horizon)
    return make_error(
        ErrorCode::out_of_range, "horizon",
        "horizon must be a whole number of ticks in [1, " + std::to_string(max_horizon) + "] for " +
            std::string(watch_noise_name(p.noise)) + " noise, got " + std::to_string(p.horizon));
  switch (p.noise) {
    case WatchNoise::laplace:
      CGP_RETURN_IF_ERROR(require_finite_positive("epsilon", p.epsilon));
      if (p.sigma != 0)
        return make_error(ErrorCode::invalid_argument, "sigma",
                          "sigma is for gaussian_expost watches; a laplace watch takes epsilon "
                          "only, got sigma " +
                              format_number(p.sigma));
      // A loss of 2^32 across the clamp range protects nothing, and the device's grid
      // (2^-24/ε) needs the bound to keep scores within 2^57 grid units.
      if (!(p.epsilon * std::max(std::fabs(p.clamp_lo), std::fabs(p.clamp_hi)) <= 0x1p32))
        return make_error(
            ErrorCode::out_of_range, "epsilon",
            "epsilon * max(|clamp_lo|, |clamp_hi|) must be at most 2^32, got " +
                format_number(p.epsilon * std::max(std::fabs(p.clamp_lo), std::fabs(p.clamp_hi))));
      break;
    case WatchNoise::gaussian_expost:
      CGP_RETURN_IF_ERROR(require_finite_positive("sigma", p.sigma));
      if (p.epsilon != 0)
        return make_error(ErrorCode::invalid_argument, "epsilon",
                          "epsilon is for laplace watches; a gaussian_expost watch takes sigma "
                          "only (its loss is computed ex post), got epsilon " +
                              format_number(p.epsilon));
      if (!(p.sigma <= 0x1p40 &&
            std::max(std::fabs(p.clamp_lo), std::fabs(p.clamp_hi)) / p.sigma <= 0x1p32))
        return make_error(ErrorCode::out_of_range, "sigma",
                          "sigma must be at most 2^40 and at least max(|clamp_lo|, |clamp_hi|) / "
                          "2^32, got " +
                              format_number(p.sigma));
      break;
    default:
      return make_error(ErrorCode::invalid_argument, "noise", "noise is not a known value");
  }
  CGP_RETURN_IF_ERROR(require_finite("tick_seconds", p.tick_seconds));
  CGP_RETURN_IF_ERROR(require_finite("start_unix_seconds", p.start_unix_seconds));
  // start 0 with a tick length: a coordinator stamps its clock's "now" before sending it.
  if (p.tick_seconds != 0 || p.start_unix_seconds != 0) {
    if (!(p.tick_seconds >= 1e-3 && p.tick_seconds <= 1e7))
      return make_error(ErrorCode::out_of_range, "tick_seconds",
                        "tick_seconds must lie in [0.001, 1e7] for a scheduled watch, got " +
                            format_number(p.tick_seconds));
    if (!(p.start_unix_seconds >= 0 && p.start_unix_seconds < 1e11))
      return make_error(ErrorCode::out_of_range, "start_unix_seconds",
                        "start_unix_seconds must be 0 (now) or a time after 1970, got " +
                            format_number(p.start_unix_seconds));
  }
  WatchSpec spec;
  spec.params_ = std::move(p);
  return spec;
}

std::uint64_t WatchSpec::tick_at(double unix_seconds) const noexcept {
  const double elapsed = unix_seconds - params_.start_unix_seconds;
  if (!(elapsed >= 0)) return 0;
  const double k = std::floor(elapsed / params_.tick_seconds) + 1;
  const auto past_end = static_cast<double>(params_.horizon + 1);
  return static_cast<std::uint64_t>(std::min(k, past_end));
}

double laplace_watch_charge(double epsilon) noexcept {
  // next_up keeps ε²/2 above its exact value; device_charge multiplies by (1 + 2^-10)² rounding
  // up: pure ε(1 + 2^-10)-GP gives (ε(1 + 2^-10))²/2-CGP (004 Lemma 3.1).
  return privacy::device_charge(privacy::next_up(epsilon * epsilon * 0.5));
}

std::size_t WatchSpec::required_dimension() const noexcept {
  if (params_.statistic == StatisticKind::distance_to_point) return params_.point.size();
  return params_.region ? geometry::dimension(*params_.region) : 0;
}

}  // namespace cgp
