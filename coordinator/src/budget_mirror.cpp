#include "cgp/coordinator/budget_mirror.hpp"

#include <algorithm>
#include <cmath>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/rounding.hpp"

namespace cgp::coordinator {

BudgetMirror::BudgetMirror(std::size_t users, double initial_budget)
    : remaining_(users, initial_budget), capacity_(initial_budget) {}

void BudgetMirror::add_users(std::size_t count) {
  remaining_.resize(remaining_.size() + count, capacity_);
}

Charge BudgetMirror::hold(UserId user, Charge known_charge) noexcept {
  const double before = remaining_[user];
  charge_unsettled(user, known_charge);
  // Rounded down: never more is given back than was taken.
  return Charge{std::max(0.0, privacy::subtract_down(before, remaining_[user]))};
}

void BudgetMirror::release(UserId user, Charge taken) noexcept {
  if (!(std::isfinite(taken.value()) && taken.value() > 0)) return;
  double& left = remaining_[user];
  left = std::min(capacity_, std::max(0.0, privacy::next_down(left + taken.value())));
}

void BudgetMirror::restore(UserId user, double remaining) noexcept {
  if (user >= remaining_.size()) return;
  const double kept = std::isfinite(remaining) && remaining > 0 ? remaining : 0.0;
  remaining_[user] = std::min(remaining_[user], kept);
}

}  // namespace cgp::coordinator
