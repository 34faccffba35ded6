#include "cgp/coordinator/budget_mirror.hpp"

#include <algorithm>
#include <cmath>

#include "cgp/common/privacy/device_charge.hpp"
#include "cgp/common/privacy/rounding.hpp"

namespace cgp::coordinator {

BudgetMirror::BudgetMirror(std::size_t users, double initial_budget)
    : remaining_(users, initial_budget) {}

bool BudgetMirror::can_ask(UserId user, double rho) const noexcept {
  return rho > 0 && privacy::device_charge(rho) <= remaining_[user];
}

void BudgetMirror::update(UserId user, ReplyKind kind, double asked_rho, double charged,
                          double reported_remaining) noexcept {
  double& left = remaining_[user];
  switch (kind) {
    case ReplyKind::answered: {
      const double cost = std::max(charged, privacy::device_charge(asked_rho));
      left = std::max(0.0, privacy::subtract_down(left, std::min(left, cost)));
      if (std::isfinite(reported_remaining)) left = std::min(left, reported_remaining);
      break;
    }
    case ReplyKind::refused:
      if (std::isfinite(reported_remaining)) left = std::min(left, reported_remaining);
      break;
    case ReplyKind::no_answer: {
      const double cost = privacy::device_charge(asked_rho);
      left = std::max(0.0, privacy::subtract_down(left, std::min(left, cost)));
      break;
    }
    case ReplyKind::rejected:
      break;
  }
}

void BudgetMirror::update(std::span<const UserId> users, std::span<const double> asked_rho,
                          const RoundReplies& replies) noexcept {
  for (std::size_t k = 0; k < users.size(); ++k)
    update(users[k], replies.kind[k], asked_rho[k], replies.charged[k], replies.remaining[k]);
}

void BudgetMirror::restore(UserId user, double remaining) noexcept {
  if (user >= remaining_.size()) return;
  const double kept = std::isfinite(remaining) && remaining > 0 ? remaining : 0.0;
  remaining_[user] = std::min(remaining_[user], kept);
}

}  // namespace cgp::coordinator
