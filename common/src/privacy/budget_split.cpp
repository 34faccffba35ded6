#include "cgp/common/privacy/budget_split.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "cgp/common/validate.hpp"

namespace cgp::privacy {
namespace {

// Left-to-right double sum, as a filter adds charges.
double naive_sum(const std::vector<double>& parts) {
  double sum = 0;
  for (double p : parts) sum += p;
  return sum;
}

// Whether the exact real sum exceeds `total`. Accumulates in double-double (TwoSum), which for
// at most kMaxRounds positive terms is exact to far below one ulp of the total.
bool exact_sum_exceeds(const std::vector<double>& parts, double total) {
  double hi = 0, lo = 0;
  for (double p : parts) {
    double s = hi + p;
    double bp = s - hi;
    double err = (hi - (s - bp)) + (p - bp);
    hi = s;
    lo += err;
  }
  double s = hi + lo;
  double tail = lo - (s - hi);
  return s > total || (s == total && tail > 0);
}

// Every part > 0, and neither sum of the parts above `total`.
Expected<std::vector<double>> checked_parts(std::vector<double> parts, double total,
                                            const char* name) {
  for (std::size_t j = 0; j < parts.size(); ++j) {
    if (!(parts[j] > 0)) {
      return make_error(ErrorCode::out_of_range, name,
                        std::string(name) + " = " + format_number(total) + " split into " +
                            std::to_string(parts.size()) + " rounds gives a zero part in round " +
                            std::to_string(j + 1) + "; use a larger " + name + " or fewer rounds");
    }
  }
  // Rounding may leave the parts a few ulps over the total. Shave one ulp off every part until
  // neither the exact nor the left-to-right sum exceeds it: each pass lowers the sum by about
  // ulp(total).
  for (int pass = 0; pass < 64 && (naive_sum(parts) > total || exact_sum_exceeds(parts, total));
       ++pass) {
    for (double& p : parts) p = std::nextafter(p, 0.0);
  }
  if (naive_sum(parts) > total || exact_sum_exceeds(parts, total)) {
    // Unreachable for the schedules here; fail closed rather than overspend.
    return make_error(ErrorCode::out_of_range, name,
                      std::string("could not split ") + name + " without overspending");
  }
  return parts;
}

}  // namespace

Expected<std::vector<double>> split_budget(double rho, std::size_t rounds, SplitSchedule schedule) {
  CGP_RETURN_IF_ERROR(require_finite_positive("rho", rho));
  CGP_RETURN_IF_ERROR(require_count_in("c", rounds, 1, kMaxRounds));

  std::vector<double> parts(rounds);
  if (schedule == SplitSchedule::even) {
    for (double& p : parts) p = rho / static_cast<double>(rounds);
  } else {
    // 2^{j−1}/(2^c − 1) = 2^{j−1−c} / (1 − 2^{−c}); the second form has no overflow for c ≤ 1023.
    double denominator = -std::expm1(-static_cast<double>(rounds) * std::log(2.0));
    for (std::size_t j = 0; j < rounds; ++j)
      parts[j] =
          rho * (std::ldexp(1.0, static_cast<int>(j) - static_cast<int>(rounds)) / denominator);
  }
  return checked_parts(std::move(parts), rho, "rho");
}

Expected<std::vector<double>> geometric_split(double cap, double growth, std::size_t max_rounds,
                                              double first) {
  CGP_RETURN_IF_ERROR(require_finite_positive("cap", cap));
  CGP_RETURN_IF_ERROR(require_finite_positive("growth", growth));
  if (!(growth > 1))
    return make_error(ErrorCode::out_of_range, "growth",
                      "growth must be > 1, got " + format_number(growth));
  CGP_RETURN_IF_ERROR(require_count_in("max_rounds", max_rounds, 1, kMaxRounds));
  if (!(std::isfinite(first) && first >= 0 && first <= cap))
    return make_error(
        ErrorCode::out_of_range, "first",
        "first must be in [0, cap = " + format_number(cap) + "], got " + format_number(first));
  const double c = static_cast<double>(max_rounds);
  std::vector<double> parts;
  if (first == 0) {
    // cap·(g − 1)·g^(j−1−c)/(1 − g^−c): no overflow, and for g = 2 the very expression of
    // split_budget's doubling.
    const double denominator = -std::expm1(-c * std::log(growth));
    for (std::size_t j = 0; j < max_rounds; ++j)
      parts.push_back(cap *
                      ((growth - 1) * std::pow(growth, static_cast<double>(j) - c) / denominator));
  } else {
    double spent = 0;
    for (std::size_t j = 0; j < max_rounds && spent < cap; ++j) {
      const double part = std::min(first * std::pow(growth, static_cast<double>(j)), cap - spent);
      parts.push_back(part);
      spent += part;
    }
  }
  return checked_parts(std::move(parts), cap, "cap");
}

Expected<double> rho_to_reach_sigma(double lipschitz, double sigma, double rho_bar) {
  CGP_RETURN_IF_ERROR(require_finite_positive("lipschitz", lipschitz));
  CGP_RETURN_IF_ERROR(require_finite_positive("sigma", sigma));
  if (!(std::isfinite(rho_bar) && rho_bar >= 0))
    return make_error(ErrorCode::out_of_range, "rho_bar",
                      "rho_bar must be finite and >= 0, got " + format_number(rho_bar));
  // Each operation rounded up: the returned ρ is at least the real K²/(2σ²) − ρ̄.
  const double k2 = std::nextafter(lipschitz * lipschitz, INFINITY);
  const double two_s2 = std::nextafter(2 * sigma * sigma, 0.0);
  const double needed = std::nextafter(k2 / two_s2, INFINITY);
  if (!std::isfinite(needed))
    return make_error(ErrorCode::out_of_range, "sigma",
                      "sigma = " + format_number(sigma) + " needs an unbounded rho");
  if (needed <= rho_bar) return 0.0;
  return std::nextafter(needed - rho_bar, INFINITY);
}

Expected<SplitSchedule> parse_split_schedule(std::string_view name) {
  if (name == "even") return SplitSchedule::even;
  if (name == "doubling" || name == "double") return SplitSchedule::doubling;
  return make_error(ErrorCode::invalid_argument, "split",
                    "split must be 'even' or 'doubling', got '" + std::string(name) + "'");
}

std::string_view split_schedule_name(SplitSchedule schedule) noexcept {
  return schedule == SplitSchedule::even ? "even" : "doubling";
}

}  // namespace cgp::privacy
