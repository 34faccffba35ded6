// The coordinator's worst-case view of every user's remaining budget (paper Alg. 2): updated
// from replies, and never asking a user for more than it says is left.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cgp/common/privacy/rounding.hpp"
#include "cgp/coordinator/charge.hpp"
#include "cgp/coordinator/fleet.hpp"

namespace cgp::coordinator {

class BudgetMirror {
 public:
  BudgetMirror(std::size_t users, double initial_budget);

  double remaining(UserId user) const noexcept { return remaining_[user]; }
  // Where remaining(0) lives, for prefetching (RoundFold::prefetch); read-only for callers.
  const double* remaining_data() const noexcept { return remaining_.data(); }
  std::size_t size() const noexcept { return remaining_.size(); }
  // Users enrolled since (a coordinator that follows its enrolment): appended with the whole
  // budget, as a device that never answered has it; lower one with restore() when its id was
  // charged before. Existing users keep their values.
  void add_users(std::size_t count);
  // Whether a request the device will charge `charge` for fits (charge =
  // privacy::device_charge(ρ) of the asked ρ, computed once for the many users a round asks the
  // same ρ). The mirror speaks charges only: the asked ρ stays inside the engine.
  bool can_pay(UserId user, Charge charge) const noexcept {
    return charge.value() <= remaining_[user];
  }
  // After a round: an answer costs what the device charged (never less than the request's
  // known charge, privacy::device_charge of the asked ρ), a refusal reports what is left, and a
  // missing answer is assumed to have been charged (the reply may have been lost after the
  // charge).
  void update_with_charge(UserId user, ReplyKind kind, Charge known_charge, Charge charged,
                          double reported_remaining) noexcept;
  // update_with_charge for an answer, in a batch of answers with one known charge and one
  // charge: the rule's outcome depends on (left, reported) alone, so `memo` keeps the last one
  // and users in the same state (every user of a fresh query's first round, say) share it.
  // A memo serves one (known_charge, charged) pair: a new pair needs a new memo.
  struct AnswerMemo {
    std::uint64_t left_bits = 0, reported_bits = 0;
    double after = 0;
    bool valid = false;
  };
  void update_answered(UserId user, Charge known_charge, Charge charged, double reported_remaining,
                       AnswerMemo& memo) noexcept {
    double& left = remaining_[user];
    const auto left_bits = std::bit_cast<std::uint64_t>(left);
    const auto reported_bits = std::bit_cast<std::uint64_t>(reported_remaining);
    if (memo.valid && left_bits == memo.left_bits && reported_bits == memo.reported_bits) {
      left = memo.after;
      return;
    }
    update_with_charge(user, ReplyKind::answered, known_charge, charged, reported_remaining);
    memo = {left_bits, reported_bits, left, true};
  }
  // A value kept from before (a restarted coordinator's saved mirror): lowers what is left,
  // never raises it. Non-finite or negative values count as nothing left.
  void restore(UserId user, double remaining) noexcept;
  // A round whose requests may have left but whose replies were never folded in (the
  // coordinator stopped mid-query): charged in the worst case, as an unanswered request.
  // The restart rule: mirror = saved snapshot − every such round's charge.
  void charge_unsettled(UserId user, Charge known_charge) noexcept {
    update_with_charge(user, ReplyKind::no_answer, known_charge, Charge{}, 0);
  }
  // A charge a device may make later, taken now (a watch it has not armed yet): returns what
  // was taken (at most what was left), to be given back with release() if the device says it
  // charged nothing.
  Charge hold(UserId user, Charge known_charge) noexcept;
  // Gives back at most `taken` (what hold() returned), rounded down: the only way the mirror
  // rises, and only for a charge the device reported it never made.
  void release(UserId user, Charge taken) noexcept;

 private:
  std::vector<double> remaining_;
  double capacity_;
};

// A device's own report of what it has left lowers the mirror, never raises it; a negative
// report is nothing left (as restore() reads it) and a non-finite one says nothing.
inline void lower_to_report(double& left, double reported_remaining) noexcept {
  if (std::isfinite(reported_remaining)) left = std::min(left, std::max(0.0, reported_remaining));
}

// Inline: the engine calls it once per user per round.
inline void BudgetMirror::update_with_charge(UserId user, ReplyKind kind, Charge known_charge,
                                             Charge charged, double reported_remaining) noexcept {
  double& left = remaining_[user];
  switch (kind) {
    case ReplyKind::answered: {
      const double cost = std::max(charged, known_charge).value();
      left = std::max(0.0, privacy::subtract_down(left, std::min(left, cost)));
      lower_to_report(left, reported_remaining);
      break;
    }
    case ReplyKind::refused:
      lower_to_report(left, reported_remaining);
      break;
    case ReplyKind::no_answer: {
      const double cost = known_charge.value();
      left = std::max(0.0, privacy::subtract_down(left, std::min(left, cost)));
      break;
    }
    case ReplyKind::rejected:
    case ReplyKind::not_delivered:
      break;
  }
}

}  // namespace cgp::coordinator
