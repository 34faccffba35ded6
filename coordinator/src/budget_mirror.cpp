#include "cgp/coordinator/budget_mirror.hpp"

#include <algorithm>
#include <cmath>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/rounding.hpp"

namespace cgp::coordinator {

BudgetMirror::BudgetMirror(std::size_t users, double initial_budget)
    : remaining_(users, initial_budget), capacity_(initial_budget) {}

double BudgetMirror::hold(UserId user, double known_charge) noexcept {
  const double before = remaining_[user];
  update_with_charge(user, ReplyKind::no_answer, known_charge, 0, 0);
  // Rounded down: never more is given back than was taken.
  return std::max(0.0, privacy::subtract_down(before, remaining_[user]));
}

void BudgetMirror::release(UserId user, double taken) noexcept {
  if (!(std::isfinite(taken) && taken > 0)) return;
  double& left = remaining_[user];
  left = std::min(capacity_, std::max(0.0, privacy::next_down(left + taken)));
}

void BudgetMirror::restore(UserId user, double remaining) noexcept {
  if (user >= remaining_.size()) return;
  const double kept = std::isfinite(remaining) && remaining > 0 ? remaining : 0.0;
  remaining_[user] = std::min(remaining_[user], kept);
}

}  // namespace cgp::coordinator
