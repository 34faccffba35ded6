#include "analyst_validation.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "cgp/common/privacy/budget_split.hpp"
#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::transport::detail {

Status validate_query_options(const v1::QueryOptions& in, double rho_capacity) {
  if (in.adaptive()) {
    if (in.rho() != 0)
      return make_error(ErrorCode::invalid_argument, "rho",
                        "rho must be unset (0) with adaptive, got " + format_number(in.rho()));
  } else {
    // The charge cap of every user: a NaN or 0 here once ran an adaptive query and charged
    // every device.
    if (!(std::isfinite(in.rho()) && in.rho() > 0))
      return make_error(
          ErrorCode::out_of_range, "rho",
          "rho must be finite and > 0 (or adaptive set), got " + format_number(in.rho()));
    // What a device charges at most for the ρ it is asked: below its smallest answerable ρ
    // every device would reject the request, after it travelled to all of them.
    const double smallest = privacy::min_rho(rho_capacity);
    if (privacy::rho_within_charge(in.rho()) < smallest)
      return make_error(ErrorCode::out_of_range, "rho",
                        "rho " + format_number(in.rho()) +
                            " is below the smallest charge devices answer (" +
                            format_number(privacy::device_charge(smallest)) + ")");
  }
  // 0 = the default 0.1; otherwise the open interval the help states.
  if (in.beta() != 0 && !(std::isfinite(in.beta()) && in.beta() > 0 && in.beta() < 1))
    return make_error(ErrorCode::out_of_range, "beta",
                      "beta must be in (0, 1), got " + format_number(in.beta()));
  if (in.has_min_coverage() && !(in.min_coverage() >= 0 && in.min_coverage() <= 1))
    return make_error(ErrorCode::out_of_range, "min_coverage",
                      "min_coverage must be in [0, 1], got " + format_number(in.min_coverage()));
  if (in.has_max_missing_share() && !(in.max_missing_share() >= 0 && in.max_missing_share() <= 1))
    return make_error(
        ErrorCode::out_of_range, "max_missing_share",
        "max_missing_share must be in [0, 1], got " + format_number(in.max_missing_share()));
  if (in.rounds() > 64)
    return make_error(ErrorCode::out_of_range, "rounds", "rounds must be 1..64");
  return {};
}

Status validate_accuracy(const v1::AccuracyTarget& in, bool needs_target) {
  if (needs_target) {
    if (!(std::isfinite(in.relative()) && in.relative() >= 0 && in.relative() < 1))
      return make_error(ErrorCode::out_of_range, "relative",
                        "relative must be in [0, 1), got " + format_number(in.relative()));
    if (!(std::isfinite(in.absolute()) && in.absolute() >= 0))
      return make_error(ErrorCode::out_of_range, "absolute",
                        "absolute must be finite and >= 0, got " + format_number(in.absolute()));
    if (in.relative() == 0 && in.absolute() == 0)
      return make_error(ErrorCode::invalid_argument, "target",
                        "the target needs relative > 0 or absolute > 0");
  }
  if (in.max_rounds() > 64)
    return make_error(ErrorCode::out_of_range, "max_rounds", "max_rounds must be 1..64");
  if (in.growth() != 0 && !(std::isfinite(in.growth()) && in.growth() > 1))
    return make_error(ErrorCode::out_of_range, "growth",
                      "growth must be > 1 (0 = 2), got " + format_number(in.growth()));
  if (!(in.first() >= 0 && in.first() <= 1))
    return make_error(ErrorCode::out_of_range, "first",
                      "first must be in [0, 1], got " + format_number(in.first()));
  return {};
}

Status rounds_answerable(double cap, const coordinator::QueryOptions& o, double rho_capacity) {
  const std::size_t rounds = coordinator::eliminates(o.method) ? o.rounds : 1;
  auto fractions = privacy::split_budget(1.0, rounds, o.split);
  if (!fractions) return fractions.error();
  const double smallest_fraction = *std::min_element(fractions->begin(), fractions->end());
  // The engine's own shave (1 − 2^-40) is well inside the 2^-30 kept here.
  const double smallest = privacy::rho_within_charge(cap) * smallest_fraction * (1 - 0x1p-30);
  if (smallest < privacy::min_rho(rho_capacity))
    return make_error(ErrorCode::out_of_range, "rho",
                      "rho " + format_number(cap) + " over " + std::to_string(rounds) +
                          " rounds asks as little as " + format_number(smallest) +
                          " in a round, below what devices answer (" +
                          format_number(privacy::min_rho(rho_capacity)) +
                          "): raise rho or lower the rounds");
  return {};
}

}  // namespace cgp::transport::detail
