#include "cgp/coordinator/budget_mirror.hpp"

#include <algorithm>
#include <cmath>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/rounding.hpp"

namespace cgp::coordinator {

BudgetMirror::BudgetMirror(std::size_t users, double initial_budget)
    : remaining_(users, initial_budget), capacity_(initial_budget) {}

bool BudgetMirror::can_ask(UserId user, double rho) const noexcept {
  return rho > 0 && privacy::device_charge(rho) <= remaining_[user];
}

void BudgetMirror::update(UserId user, ReplyKind kind, double asked_rho, double charged,
                          double reported_remaining) noexcept {
  update_with_charge(user, kind, privacy::device_charge(asked_rho), charged, reported_remaining);
}

void BudgetMirror::update(std::span<const UserId> users, std::span<const double> asked_rho,
                          const RoundReplies& replies) noexcept {
  // Rounds ask most users the same ρ: its charge is computed once per run of equal ρ.
  double last_rho = 0, last_charge = 0;
  for (std::size_t k = 0; k < users.size(); ++k) {
    if (k == 0 || asked_rho[k] != last_rho) {
      last_rho = asked_rho[k];
      last_charge = privacy::device_charge(last_rho);
    }
    update_with_charge(users[k], replies.kind[k], last_charge, replies.charged[k],
                       replies.remaining[k]);
  }
}

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
