// The device's privacy filter (paper Alg. 1 with eq. (7), Theorem 4.4; eq. (10), Theorem 4.5).
// Both filter kinds reduce to Σ charges ≤ capacity: the CGP budget itself, or the capacity R*
// of eq. (10) computed once (common/src/privacy/approx_gp_filter.md). The checks are inline:
// simulated fleets run them once per user per round.
#pragma once

#include <cmath>

#include "cgp/common/device_config.hpp"
#include "cgp/common/privacy/rounding.hpp"

namespace cgp::client {

class PrivacyFilter {
 public:
  // Inline: a simulated fleet keeps spent and halted as arrays and builds the filter per user.
  explicit PrivacyFilter(const DeviceConfig& config, double spent = 0, bool halted = false) noexcept
      : capacity_(config.rho_capacity()),
        spent_(spent),
        sticky_(config.sticky_halt()),
        halted_(halted) {}

  // Whether a release charging `charge` may go out now. Refusal depends only on public charges
  // (Thm 4.3), so a later, smaller request may still be admitted, unless the filter is sticky
  // and has halted (Alg. 1's HALT).
  bool admits(double charge) const noexcept {
    if (halted_) return false;
    if (!(charge > 0) || !std::isfinite(charge)) return false;
    return spent_after(charge) <= capacity_;
  }
  // The spent total after admitting `charge`, rounded up: what the ledger records.
  double spent_after(double charge) const noexcept {
    // One rounded addition: next_up makes the recorded total ≥ the exact sum of charges.
    return privacy::next_up(spent_ + charge);
  }
  // Precondition: admits(charge) and the ledger recorded spent_after(charge).
  void commit(double charge) noexcept { spent_ = spent_after(charge); }
  // Called on a refusal: with sticky_halt the filter stops for good (and the caller records it).
  // Returns whether this call changed the state.
  bool halt_if_sticky() noexcept;

  double spent() const noexcept { return spent_; }
  bool halted() const noexcept { return halted_; }
  double capacity() const noexcept { return capacity_; }
  // capacity − spent, rounded down, never negative; 0 once halted.
  double remaining() const noexcept {
    if (halted_) return 0.0;
    return at_least_zero(privacy::subtract_down(capacity_, spent_));
  }
  // What remaining() will be after commit(charge).
  double remaining_after(double charge) const noexcept {
    if (halted_) return 0.0;
    return at_least_zero(privacy::subtract_down(capacity_, spent_after(charge)));
  }

 private:
  static double at_least_zero(double x) noexcept { return x > 0 ? x : 0.0; }  // NaN → 0
  double capacity_;
  double spent_;
  bool sticky_;
  bool halted_;
};

// The filter's decision on a public charge, the one rule every device path follows (the
// device's releases, its watches, the simulated fleet): admitted, or refused, and on a refusal
// a sticky filter halts for good, which `on_halt` records (the ledger, or a fleet's array).
// An admitted charge is committed by the caller once it is recorded (charge before release).
template <class OnHalt>
[[nodiscard]] inline bool admit_or_halt(PrivacyFilter& filter, double charge, OnHalt&& on_halt) {
  if (filter.admits(charge)) return true;
  if (filter.halt_if_sticky()) on_halt();
  return false;
}

}  // namespace cgp::client
