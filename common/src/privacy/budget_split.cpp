#include "cgp/common/privacy/budget_split.hpp"

#include <cmath>

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
  for (std::size_t j = 0; j < rounds; ++j) {
    if (!(parts[j] > 0)) {
      return make_error(ErrorCode::out_of_range, "rho",
                        "rho = " + format_number(rho) + " split into c = " +
                            std::to_string(rounds) + " rounds gives a zero part in round " +
                            std::to_string(j + 1) + "; use a larger rho or fewer rounds");
    }
  }
  // Rounding may leave the parts a few ulps over ρ. Shave one ulp off every part until neither
  // the exact nor the left-to-right sum exceeds ρ: each pass lowers the sum by about ulp(ρ).
  for (int pass = 0; pass < 64 && (naive_sum(parts) > rho || exact_sum_exceeds(parts, rho));
       ++pass) {
    for (double& p : parts) p = std::nextafter(p, 0.0);
  }
  if (naive_sum(parts) > rho || exact_sum_exceeds(parts, rho)) {
    // Unreachable for the schedules above; fail closed rather than overspend.
    return make_error(ErrorCode::out_of_range, "rho", "could not split rho without overspending");
  }
  return parts;
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
