#include "cgp/common/privacy/expost_filter.hpp"

#include <cmath>

#include "cgp/common/privacy/rounding.hpp"
#include "cgp/common/validate.hpp"

namespace cgp::privacy {
namespace {

// total + step rounded up (both ≥ 0): exact when representable, else the double just above, so
// a running total never understates what was spent. Fast2Sum gives the rounding error exactly.
double add_up(double total, double step) {
  const double big = std::fmax(total, step), small = std::fmin(total, step);
  const double sum = big + small;
  const double error = small - (sum - big);  // > 0: sum is below the exact total
  return error > 0 ? next_up(sum) : sum;
}

Status require_non_negative(const char* name, double value) {
  CGP_RETURN_IF_ERROR(require_finite(name, value));
  if (value < 0)
    return make_error(ErrorCode::invalid_argument, name,
                      std::string(name) + " must be >= 0, got " + format_number(value));
  return {};
}

}  // namespace

Expected<ExPostFilter> ExPostFilter::create(double epsilon, double delta) {
  CGP_RETURN_IF_ERROR(require_finite_positive("epsilon", epsilon));
  CGP_RETURN_IF_ERROR(require_non_negative("delta", delta));
  if (!(delta < 1))
    return make_error(ErrorCode::out_of_range, "delta",
                      "delta must be below 1, got " + format_number(delta));
  return ExPostFilter(epsilon, delta);
}

Expected<ExPostFilter> ExPostFilter::restore(double epsilon, double delta, double spent_epsilon,
                                             double spent_delta, bool halted) {
  CGP_ASSIGN_OR_RETURN(ExPostFilter filter, create(epsilon, delta));
  CGP_RETURN_IF_ERROR(require_non_negative("spent_epsilon", spent_epsilon));
  CGP_RETURN_IF_ERROR(require_non_negative("spent_delta", spent_delta));
  filter.spent_epsilon_ = spent_epsilon;
  filter.spent_delta_ = spent_delta;
  filter.halted_ = halted;
  return filter;
}

bool ExPostFilter::admits(double worst_epsilon, double step_delta) const noexcept {
  if (halted_) return false;
  if (!(std::isfinite(worst_epsilon) && worst_epsilon >= 0 && std::isfinite(step_delta) &&
        step_delta >= 0))
    return false;
  return add_up(spent_epsilon_, worst_epsilon) <= epsilon_ &&
         add_up(spent_delta_, step_delta) <= delta_;
}

Expected<bool> ExPostFilter::charge(double worst_epsilon, double step_delta,
                                    double realised_epsilon) {
  CGP_RETURN_IF_ERROR(require_non_negative("worst_epsilon", worst_epsilon));
  CGP_RETURN_IF_ERROR(require_non_negative("step_delta", step_delta));
  CGP_RETURN_IF_ERROR(require_non_negative("realised_epsilon", realised_epsilon));
  if (!admits(worst_epsilon, step_delta)) {
    halted_ = true;
    return false;
  }
  // Lemma B.2 charges the step's ex-post function, which is at most its declared worst.
  spent_epsilon_ = add_up(spent_epsilon_, std::fmin(realised_epsilon, worst_epsilon));
  spent_delta_ = add_up(spent_delta_, step_delta);
  return true;
}

}  // namespace cgp::privacy
