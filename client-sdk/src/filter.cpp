#include "cgp/client/filter.hpp"

#include <cmath>

#include "cgp/common/privacy/rounding.hpp"

namespace cgp::client {

PrivacyFilter::PrivacyFilter(const DeviceConfig& config, double spent, bool halted)
    : capacity_(config.rho_capacity()),
      sticky_(config.sticky_halt()),
      spent_(spent),
      halted_(halted) {}

double PrivacyFilter::spent_after(double charge) const noexcept {
  // One rounded addition: nextafter up makes the recorded total ≥ the exact sum of charges.
  return privacy::next_up(spent_ + charge);
}

bool PrivacyFilter::admits(double charge) const noexcept {
  if (halted_) return false;
  if (!(charge > 0) || !std::isfinite(charge)) return false;
  return spent_after(charge) <= capacity_;
}

void PrivacyFilter::commit(double charge) noexcept {
  spent_ = spent_after(charge);
}

bool PrivacyFilter::halt_if_sticky() noexcept {
  if (!sticky_ || halted_) return false;
  halted_ = true;
  return true;
}

double PrivacyFilter::remaining() const noexcept {
  if (halted_) return 0.0;
  return std::fmax(0.0, privacy::subtract_down(capacity_, spent_));
}

double PrivacyFilter::remaining_after(double charge) const noexcept {
  if (halted_) return 0.0;
  return std::fmax(0.0, privacy::subtract_down(capacity_, spent_after(charge)));
}

}  // namespace cgp::client
